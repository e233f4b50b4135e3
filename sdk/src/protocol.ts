// Every generated message, enum and service of the Parley protocol (sdk/src/gen, from shared/proto
// by `npm run generate`), so applications import protocol types from the SDK alone.
export * from "./gen/api/v1/agent_pb.js";
export * from "./gen/api/v1/auth_pb.js";
export * from "./gen/api/v1/common_pb.js";
export * from "./gen/api/v1/contact_pb.js";
export * from "./gen/api/v1/conversation_pb.js";
export * from "./gen/api/v1/gateway_pb.js";
export * from "./gen/api/v1/group_pb.js";
export * from "./gen/api/v1/media_pb.js";
export * from "./gen/api/v1/message_pb.js";
export * from "./gen/api/v1/push_pb.js";
export * from "./gen/api/v1/rules_pb.js";
export * from "./gen/api/v1/sync_pb.js";
export * from "./gen/api/v1/updates_pb.js";
export * from "./gen/api/v1/user_pb.js";
export * from "./gen/shared/v1/agent_pb.js";
export * from "./gen/shared/v1/common_pb.js";
export * from "./gen/shared/v1/contact_pb.js";
export * from "./gen/shared/v1/conversation_pb.js";
export * from "./gen/shared/v1/error_pb.js";
export * from "./gen/shared/v1/group_pb.js";
export * from "./gen/shared/v1/media_pb.js";
export * from "./gen/shared/v1/message_pb.js";
export * from "./gen/shared/v1/updates_pb.js";

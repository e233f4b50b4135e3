// Every generated message, enum and service of the Parley protocol, so applications import protocol
// types from the SDK alone. The one generated copy is shared/gen (`npm run generate`, from
// shared/proto); the SDK's build compiles it into sdk/dist with the SDK's own code.
export * from "../../shared/gen/api/v1/agent_pb.js";
export * from "../../shared/gen/api/v1/auth_pb.js";
export * from "../../shared/gen/api/v1/common_pb.js";
export * from "../../shared/gen/api/v1/contact_pb.js";
export * from "../../shared/gen/api/v1/conversation_pb.js";
export * from "../../shared/gen/api/v1/gateway_pb.js";
export * from "../../shared/gen/api/v1/group_pb.js";
export * from "../../shared/gen/api/v1/media_pb.js";
export * from "../../shared/gen/api/v1/message_pb.js";
export * from "../../shared/gen/api/v1/push_pb.js";
export * from "../../shared/gen/api/v1/rules_pb.js";
export * from "../../shared/gen/api/v1/sync_pb.js";
export * from "../../shared/gen/api/v1/updates_pb.js";
export * from "../../shared/gen/api/v1/user_pb.js";
export * from "../../shared/gen/shared/v1/agent_pb.js";
export * from "../../shared/gen/shared/v1/common_pb.js";
export * from "../../shared/gen/shared/v1/contact_pb.js";
export * from "../../shared/gen/shared/v1/conversation_pb.js";
export * from "../../shared/gen/shared/v1/error_pb.js";
export * from "../../shared/gen/shared/v1/group_pb.js";
export * from "../../shared/gen/shared/v1/media_pb.js";
export * from "../../shared/gen/shared/v1/message_pb.js";
export * from "../../shared/gen/shared/v1/updates_pb.js";

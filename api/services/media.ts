import type { DescMessage, DescMethodUnary, MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { ServiceBroker } from "moleculer";
import type { RpcParams } from "../../shared/caller.js";
import { MediaService } from "../../shared/gen/api/v1/media_pb.js";
import { fromWire, type WireMessage } from "../../shared/wire.js";
import { toWireWithBytes } from "../../shared/wire-bytes.js";
import { authenticate, forwardingService, requestFactsKey, validateRequest, type RouteTable, type RpcRoute } from "../rpc.js";

export const mediaRoutes: RouteTable<typeof MediaService> = {
  uploadFile: { access: "any", action: "media.uploadFile" },
  initUpload: { access: "any", action: "media.initUpload" },
  uploadChunk: { access: "any", action: "media.uploadChunk" },
  completeUpload: { access: "any", action: "media.completeUpload" },
  getDownloadURL: { access: "any", action: "media.getDownloadURL" },
};

/** Forwards like forwardingService, but encodes the request's large bytes field natively (shared/wire-bytes.ts). */
function forwardWithBytes<I extends DescMessage, O extends DescMessage>(broker: ServiceBroker, method: DescMethodUnary<I, O>, route: RpcRoute, field: string) {
  return async (request: MessageShape<I>, context: HandlerContext): Promise<MessageShape<O>> => {
    const caller = await authenticate(broker, context, route.access);
    validateRequest(method.input, request);
    const facts = context.values.get(requestFactsKey);
    const params: RpcParams = { caller, request: toWireWithBytes(method.input, request, field), clientIp: facts.clientIp, host: facts.host };
    return fromWire(method.output, (await broker.call(route.action, params)) as WireMessage);
  };
}

export const mediaService = (broker: ServiceBroker): ServiceImpl<typeof MediaService> => ({
  ...forwardingService(broker, MediaService, mediaRoutes),
  uploadFile: forwardWithBytes(broker, MediaService.method.uploadFile, mediaRoutes.uploadFile, "data"),
  uploadChunk: forwardWithBytes(broker, MediaService.method.uploadChunk, mediaRoutes.uploadChunk, "chunk"),
});

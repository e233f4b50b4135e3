import type { ServiceBroker } from "moleculer";
import { MediaService } from "../../shared/gen/api/v1/media_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const mediaRoutes: RouteTable<typeof MediaService> = {
  uploadFile: { access: "any", action: "media.uploadFile" },
  initUpload: { access: "any", action: "media.initUpload" },
  uploadChunk: { access: "any", action: "media.uploadChunk" },
  completeUpload: { access: "any", action: "media.completeUpload" },
  getDownloadURL: { access: "any", action: "media.getDownloadURL" },
};

export const mediaProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, MediaService, mediaRoutes);

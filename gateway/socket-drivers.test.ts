// The socket port's conformance suite on each driver, each served by the front that carries it in
// production: `ws` on the node:http front, uWebSockets.js on the uWS front.
import { defaultHttpTimeouts, type EdgeFront, type EdgeRoutes } from "../edge/edge-http.js";
import { nodeFront } from "../edge/node-front.js";
import { uwsFront } from "../edge/uws-front.js";
import { describeSocketConformance, type SocketDriverUnderTest } from "./socket-conformance.js";
import { loadNativeUws } from "./uws-native.js";

const routes: EdgeRoutes = {
  whyNotReady: () => undefined,
  downloads: (_req, reply) => void reply.send(404, { "content-type": "text/plain" }, "not found\n"),
  logger: { error: () => {} },
};

async function served(front: EdgeFront): Promise<SocketDriverUnderTest> {
  const port = await front.listen("127.0.0.1", 0);
  return {
    accept: (path, onConnection) => front.sockets(path, onConnection),
    port,
    close: async () => {
      await front.drain(0, Promise.resolve());
      await front.close();
    },
  };
}

describeSocketConformance("ws", () => served(nodeFront({ routes, timeouts: defaultHttpTimeouts, api: () => false, logger: routes.logger })));

describeSocketConformance("uWebSockets.js", () =>
  served(uwsFront({ uws: loadNativeUws(), routes, timeouts: defaultHttpTimeouts, trustedProxies: undefined, api: () => undefined, logger: routes.logger })),
);

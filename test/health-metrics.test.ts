import { expect } from "chai";
import WebSocket from "ws";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { samplesOf, sumOf } from "./support/prometheus-text.js";

describe("GET /healthz and GET /metrics", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer();
  });
  after(async () => server.dispose());

  it("/healthz answers 200 once the server accepts requests", async () => {
    const response = await fetch(server.url + "/healthz");
    expect(response.status).to.equal(200);
  });

  it("/metrics serves request counts and latencies per RPC and open sockets in Prometheus text", async () => {
    await client(server, AuthService, "json").getClientConfig({});
    const socket = new WebSocket(server.url.replace("http", "ws") + "/ws");
    await new Promise((resolve) => socket.once("open", resolve));
    const text = await (await fetch(server.url + "/metrics")).text();
    const procedure = "/api.v1.AuthService/GetClientConfig";
    expect(sumOf(text, "parley_rpc_requests_total", { procedure, code: "ok" })).to.be.at.least(1);
    expect(samplesOf(text, "parley_rpc_duration_seconds_bucket", { procedure, le: "0.005" })).to.have.length(1);
    const open = sumOf(text, "parley_websocket_connections");
    expect(open).to.be.greaterThanOrEqual(1);
    socket.close();
  });

  it("/healthz answers 503 while draining, saying why; /livez (liveness) still answers 200", async () => {
    const draining = await startTestServer({ healthGraceMs: 500, topology: "single" });
    const stopping = draining.dispose();
    const [health, live] = await Promise.all([fetch(draining.url + "/healthz"), fetch(draining.url + "/livez")]);
    expect(health.status).to.equal(503);
    expect(await health.text()).to.equal("unavailable: not serving\n");
    expect(live.status).to.equal(200);
    await stopping;
  });
});

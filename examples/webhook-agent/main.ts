// Runs the example agent against a Parley server: starts its HTTPS endpoint, verifying with the
// agent's secret key, points the agent's webhook at it with UpdateAgentSelfConfig (which tests it
// with a request signed with that key and keeps the key), and serves.
//
//   PARLEY_URL         the server (default http://127.0.0.1:8080)
//   AGENT_TOKEN        the agent token from CreateAgent
//   AGENT_SECRET_KEY   the agent's current secret key (from CreateAgent, or the owner's latest
//                      SetAgentConfig or RegenerateAgentSecretKey)
//   TLS_CERT, TLS_KEY  PEM files of the endpoint's certificate (the server must trust its CA)
//   AGENT_PORT         port of the HTTPS endpoint (default 8443)
import { readFileSync } from "node:fs";
import { configureOwnWebhook, startWebhookAgent } from "./agent.js";

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is required (see examples/webhook-agent/main.ts)`);
    process.exit(2);
  }
  return value;
}

const serverUrl = process.env.PARLEY_URL ?? "http://127.0.0.1:8080";
const token = required("AGENT_TOKEN");
const agent = await startWebhookAgent({
  serverUrl,
  token,
  secretKey: required("AGENT_SECRET_KEY"),
  tls: { cert: readFileSync(required("TLS_CERT")), key: readFileSync(required("TLS_KEY")) },
  port: Number(process.env.AGENT_PORT ?? 8443),
});
await configureOwnWebhook(serverUrl, token, agent.url);
console.log(`agent listening at ${agent.url}; webhook configured; press Ctrl-C to stop`);
process.once("SIGINT", () => void agent.close().then(() => process.exit(0)));

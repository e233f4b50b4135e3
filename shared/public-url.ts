// Where clients reach this server, for the URLs it hands out (download links, avatar URLs, the
// WebSocket address): the configured public URL, else the Host the client addressed, taken only
// when it is a plain authority (a name or address with an optional port), never anything a client
// could smuggle a path or a scheme into.
import type { ParleyConfig } from "./config.js";

const hostAuthority = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/;

/** The Host header's value if it is a usable authority, else undefined. */
export function requestAuthority(host: string): string | undefined {
  return hostAuthority.test(host) ? host : undefined;
}

/** The base URL (no trailing slash) of links this server hands out, or undefined when none can be known. */
export function publicBaseUrl(config: Pick<ParleyConfig, "publicUrl">, host: string): string | undefined {
  if (config.publicUrl) return config.publicUrl.replace(/\/+$/, "");
  const authority = requestAuthority(host);
  return authority && `http://${authority}`;
}

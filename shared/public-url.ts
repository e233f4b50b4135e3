// Where clients reach this server, for the URLs it hands out (download links, avatar URLs, the
// WebSocket address): the configured public URL, else the Host the client addressed, taken only
// when it is a plain authority (a name or address with an optional port), never anything a client
// could smuggle a path or a scheme into. Also which Host headers are served at all.
import type { ParleyConfig } from "./config.js";

const hostAuthority = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/;
/** RFC 9110's Host: uri-host [":" port], with uri-host a bracketed IP literal or a reg-name. */
const hostSyntax = /^(?:\[[0-9A-Fa-f:.]+\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)(?::[0-9]*)?$/;

/**
 * Whether a request with this Host header is served: RFC 9112 asks for a 400 when the value is
 * invalid. Missing or empty is served (HTTP/1.0 has no Host; Node answers 400 itself to HTTP/1.1
 * without one). Beyond the RFC's syntax the value must also make a URL (a port up to 65535, a
 * well-formed IPv6 address, percent-escapes of allowed characters), since libraries build one.
 */
export function isServableHost(host: string | undefined): boolean {
  if (!host) return true;
  if (!hostSyntax.test(host)) return false;
  try {
    new URL(`http://${host}/`);
    return true;
  } catch {
    return false;
  }
}

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

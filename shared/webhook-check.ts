// The reachability check of a webhook URL, as the engine asks it of webhooks/ without
// importing it: the gateway POSTs a signed test request and reports whether it was accepted.

export interface VerifyEndpointParams {
  url: string;
  /** The key the test request is signed with: the one the configuration is about to issue. */
  secretKey: string;
}

export interface VerifyEndpointResult {
  /** The URL answered 2xx within the time limit. */
  ok: boolean;
  /** Why not, in words a developer can act on. */
  reason?: string;
  /** The URL itself was refused (not https, malformed), so no request was made. */
  invalidUrl?: boolean;
}

// RPCs posted by hand, as a client without a generated stub (or a hostile one) sends them.

export interface ConnectErrorBody {
  code: string;
  message: string;
  details?: { type: string; value: string; debug: { errorCode: number; errorName: string } }[];
}

/** Posts `body` to an RPC path; the answer's bytes, and its body read as a Connect error. */
export async function postRpc(server: { url: string }, path: string, body: string | Uint8Array, options: { contentType?: string; token?: string | null } = {}) {
  const headers: Record<string, string> = { "content-type": options.contentType ?? "application/json" };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const response = await fetch(server.url + path, { method: "POST", headers, body: typeof body === "string" ? body : Buffer.from(body) });
  const bytes = new Uint8Array(await response.arrayBuffer());
  return { status: response.status, bytes, error: () => JSON.parse(new TextDecoder().decode(bytes)) as ConnectErrorBody };
}

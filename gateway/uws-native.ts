// Loads uWebSockets.js's native binary, and nothing else. The package's own loader (src/uws.js)
// quietly substitutes a pure-JS copy built on `ws` when the binary does not load or when
// UWS_USE_FALLBACK is set: that copy is slower than using `ws` directly, so a server asked for
// uWS refuses to start instead of running on it.
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type * as Uws from "@trufflesuite/uws-js-unofficial";

export type UwsModule = typeof Uws;

const packageName = "@trufflesuite/uws-js-unofficial";

/** The path of the binary built for this platform and Node ABI, where the package keeps it. */
export function nativeBinaryPath(): string {
  const require = createRequire(import.meta.url);
  const root = dirname(require.resolve(`${packageName}/package.json`));
  return join(root, "binaries", `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`);
}

/** The values of UWS_USE_FALLBACK that make the package's loader pick its JS copy. */
const fallbackFlags = ["true", "True", "TRUE", "1"];

/**
 * The native module, or an error saying why only the fallback would load. `binaryPath` is for
 * tests that make the binary fail to load.
 */
export function loadNativeUws(env: NodeJS.ProcessEnv = process.env, binaryPath = nativeBinaryPath()): UwsModule {
  const refuse = (why: string) =>
    new Error(`SOCKET_DRIVER=uws needs uWebSockets.js's native binary, but ${why}; its JS fallback is not used. Choose SOCKET_DRIVER=ws or fix the cause.`);
  // Loading the binary directly would bypass the flag; an operator who set it expects no native uWS.
  if (fallbackFlags.includes(env.UWS_USE_FALLBACK ?? "")) throw refuse(`UWS_USE_FALLBACK=${env.UWS_USE_FALLBACK} asks for the fallback`);
  const require = createRequire(import.meta.url);
  try {
    return require(binaryPath) as UwsModule;
  } catch (err) {
    throw refuse(`${binaryPath} does not load (${err instanceof Error ? err.message.split("\n", 1)[0] : String(err)})`);
  }
}

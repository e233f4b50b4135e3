// The server as the local cluster's processes run it: one esbuild bundle of our code and of the
// packages it uses, built at launch (about 1 s). How long a restarted engine takes to serve is
// mostly how long it takes to load, and losing both engines leaves nothing to serve meanwhile.
// Start to "Moleculer starting" with --enable-source-maps, one process on this idle machine,
// median of 4 (2026-11-29):
//   tsx, ~200 TypeScript modules                                   ~2.3 s
//   a bundle of our code, the packages loaded from node_modules     1.8 s
//   the packages bundled too                                        1.6 s
//   + Kafka's option validators compiled on first use               1.3 s
//   + a source map without the sources in it                        1.05 s  (what this builds)
// With both engines starting at once under load on two cores, each figure is about twice that.
import { readFile } from "node:fs/promises";
import { build, type Plugin } from "esbuild";

/** Packages left out of the bundle: they load files that sit beside their own code, or are never loaded. */
const packagesLeftOutOfTheBundle = [
  // Native addons, found by a path relative to the package.
  "better-sqlite3",
  "sharp",
  "@trufflesuite/uws-js-unofficial",
  "bufferutil",
  "utf-8-validate",
  // The mesh's serializer; loads its native decoder (cbor-extract) by a path relative to itself.
  "cbor-x",
  // Read files relative to __dirname or import.meta.url.
  "ioredis",
  "@platformatic/wasm-utils",
  // Moleculer requires them only for a serializer and a transporter Parley does not use.
  "thrift",
  "kafka-node",
];

/**
 * @platformatic/kafka compiles about 40 JSON-schema validators of client options with ajv when it
 * is imported: about 0.3 s of CPU, the largest single part of a start. It calls them only for a
 * client created with `strict: true`, which Parley never asks for. Each is compiled on its first
 * call instead; a validator keeps its contract (a function answering valid or not, with the
 * errors in its `errors` property).
 */
const kafkaValidatorsCompiledOnFirstUse: Plugin = {
  name: "kafka-validators-compiled-on-first-use",
  setup(bundler) {
    bundler.onLoad({ filter: /[\\/]@platformatic[\\/]kafka[\\/]dist[\\/]clients[\\/].*options\.js$/ }, async ({ path }) => {
      const source = await readFile(path, "utf8");
      const compiled = source.replace(/= ajv\.compile\(/g, "= compileOnFirstUse(ajv, ");
      if (compiled === source) throw new Error(`${path}: no ajv.compile( found; @platformatic/kafka changed, see scripts/cluster/bundle.ts`);
      return { contents: `${compiled}\n${compileOnFirstUse}\n`, loader: "js" };
    });
  },
};

const compileOnFirstUse = `function compileOnFirstUse(ajv, schema) {
  let compiled;
  const validate = (data) => {
    compiled ??= ajv.compile(schema);
    const valid = compiled(data);
    validate.errors = compiled.errors;
    return valid;
  };
  return validate;
}`;

/** Builds the bundle at `outfile` (inside the repository, so that the packages left out resolve to node_modules). */
export async function bundleServer(outfile: string): Promise<string> {
  await build({
    entryPoints: [new URL("../../main.ts", import.meta.url).pathname],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: packagesLeftOutOfTheBundle,
    // Bundled CommonJS packages call require.
    banner: { js: 'import { createRequire as parleyCreateRequire } from "node:module"; const require = parleyCreateRequire(import.meta.url);' },
    plugins: [kafkaValidatorsCompiledOnFirstUse],
    // Stack traces name the repository's files and lines; the sources are on disk, and a map
    // that carried them too took Node (--enable-source-maps) longer to read at every start.
    sourcemap: "linked",
    sourcesContent: false,
    outfile,
    logLevel: "warning",
  });
  return outfile;
}

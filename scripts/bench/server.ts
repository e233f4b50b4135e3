// The server as `npm start` runs it, plus one thing only the benchmark needs: with node's
// --expose-gc, SIGUSR2 collects garbage, so memory is read settled rather than between collections.
process.on("SIGUSR2", () => (globalThis as { gc?: () => void }).gc?.());
await import("../../main.js");

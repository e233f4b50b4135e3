// `npm start`: the whole system in one process on embedded defaults.
import { loadConfig } from "./shared/config.js";
import { startParley } from "./server.js";
import { keepServingThroughUnhandledRejections } from "./shared/background.js";

const config = loadConfig();
// A start that fails (a bad setting, a port taken, a store that cannot be opened) ends the
// process with code 1: nothing is served yet, and an orchestrator restarts or reports it.
const parley = await startParley({ config });
parley.broker.logger.info(`Parley listening on ${config.host}:${parley.port} (data in ${config.dataDir})`);
// Once serving, a rejection nothing handled is logged and counted, not fatal (docs/OPERATIONS.md):
// every known background path catches its own errors, so one that escapes is a bug in one
// operation, which ended; ending every connection and request of the process for it would not
// undo it. Exceptions thrown synchronously out of a callback still end the process (Node's rule).
keepServingThroughUnhandledRejections(parley.broker.logger);

// SIGTERM or SIGINT stops gracefully (see Parley.stop): requests in flight get up to
// DRAIN_TIMEOUT_MS. Another signal cuts the drain short but still stops the services and closes
// the store; a third exits at once, as a crash would (SQLite recovers its log on the next start).
// A terminal's Ctrl-C under `npm start` arrives twice (from the terminal and forwarded by npm), so
// signals less than a second apart count as one.
const sameSignalMs = 1000;
let signals = 0;
let lastSignalAt = 0;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    const now = Date.now();
    if (signals > 0 && now - lastSignalAt < sameSignalMs) return;
    signals += 1;
    lastSignalAt = now;
    if (signals === 1) {
      parley.broker.logger.info(`${signal}: stopping; requests in flight get up to ${config.drainTimeoutMs} ms`);
      parley.stop().then(
        () => process.exit(0),
        (err: unknown) => {
          console.error("shutdown failed", err);
          process.exit(1);
        },
      );
    } else if (signals === 2) {
      parley.broker.logger.warn(`${signal} again: cutting the drain short`);
      void parley.stop();
    } else {
      console.error(`${signal} once more: exiting without a clean stop`);
      process.exit(1);
    }
  });
}

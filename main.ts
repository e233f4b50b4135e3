// `npm start`: the whole system in one process on embedded defaults.
import { loadConfig } from "./shared/config.js";
import { startParley } from "./server.js";

const config = loadConfig();
const parley = await startParley({ config });
parley.broker.logger.info(`Parley listening on ${config.host}:${parley.port} (data in ${config.dataDir})`);

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    parley.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error("shutdown failed", err);
        process.exit(1);
      },
    );
  });
}

// Scaffolding while the adapter's parts are written in parallel: a part not built yet refuses every
// call by name. Removed once every part exists (no part of a finished adapter uses it).
export function unbuilt<T extends object>(part: string): T {
  return new Proxy({} as T, {
    get(_target, method) {
      return () => Promise.reject(new Error(`cassandra store: ${part}.${String(method)} is not built yet`));
    },
  });
}

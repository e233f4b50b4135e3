// k6 gives scripts a console as browsers do; @types/k6 leaves it to lib.dom, which would also
// declare browser APIs k6 does not have.
declare const console: {
  log(...data: unknown[]): void;
  warn(...data: unknown[]): void;
  error(...data: unknown[]): void;
};

/**
 * Fan-out ids for events a test appends straight through the inbox: from 2^62 up, a range the
 * server's own ids (milliseconds since 2026 << 22) reach only decades from now, so they never
 * name an event the server stored.
 */
let lastTestFanOutId = 1n << 62n;
export const nextTestFanOutId = () => ++lastTestFanOutId;

// SendMessage takes a sender-chosen clientMessageId (int64 > 0) and answers a retry of the same id
// with the message it already stored. Ids must therefore never repeat for one sender, also across
// restarts: they start from the clock (microsecond-scaled milliseconds) and only ever increase.
let last = 0n;

/** A clientMessageId this process has not used, larger than any it used before. */
export function nextClientMessageId(): bigint {
  const fromClock = BigInt(Date.now()) * 1000n;
  last = fromClock > last ? fromClock : last + 1n;
  return last;
}

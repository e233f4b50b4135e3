// Ids that increase across every process: each one is taken from the shared counter by its own
// LWT. Friend request ids use it (DATA-MODEL.md §4): the spec calls them "server-assigned,
// increasing", and per-process blocks (IdBlocks) broke that in a cluster, where two engines handed
// out interleaved ranges (one user's two requests, one after the other, got 259 then 5). A Paxos
// round per request is cheap at the rate people send friend requests; per-process blocks stay for
// the ids the spec does not order (users, groups), which are created far more often.
//
// Why the order holds: an id is handed out only once the LWT that moved the counter past it
// applied, and the counter only moves forward, except by giveBack, which applies only while the
// counter still stands right after the id given back (no process took a larger one since). So an
// id taken after another was handed out is larger than it. A creation whose write failed in a way
// that may still apply (a timeout) never gives its id back: that id is a gap, never a repeat.
import type { Cql } from "./cql.js";
import { maxInt32, type IdAllocator, type IdSequence } from "./id-blocks.js";

/** The counter's row was never written: the sequence starts at `first`. */
const absent = Symbol("absent");

export class IncreasingIds implements IdAllocator {
  /** The counter as this process last saw it: the next take's guess, which a refused LWT corrects. */
  private expected: number | typeof absent | undefined;
  /** This process's takes, one after another: racing each other would only make them retry. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly cql: Cql,
    private readonly sequence: IdSequence,
    private readonly first: number,
  ) {}

  take(): Promise<number> {
    const taken = this.queue.then(() => this.takeOne());
    this.queue = taken.catch(() => undefined);
    return taken;
  }

  async giveBack(id: number): Promise<void> {
    const outcome = await this.cql.lwt("UPDATE id_blocks SET next_free = ? WHERE sequence = ? IF next_free = ?", [id, this.sequence, id + 1]).catch(() => undefined);
    // Refused: a larger id was taken since, so this one stays a gap. Unknown: read again next time.
    this.expected = outcome?.applied ? id : undefined;
  }

  async close(): Promise<void> {}

  private async takeOne(): Promise<number> {
    for (;;) {
      const current = this.expected ?? (await this.read());
      const id = current === absent ? this.first : current;
      if (id + 1 > maxInt32) throw new Error(`the ${this.sequence} id sequence is exhausted (ids are int32 and never reused)`);
      this.expected = undefined;
      const outcome =
        current === absent
          ? await this.cql.lwt("INSERT INTO id_blocks (sequence, next_free) VALUES (?, ?) IF NOT EXISTS", [this.sequence, id + 1])
          : await this.cql.lwt("UPDATE id_blocks SET next_free = ? WHERE sequence = ? IF next_free = ?", [id + 1, this.sequence, id]);
      if (outcome.applied) {
        this.expected = id + 1;
        return id;
      }
      // Another process moved the counter: the refusal carries where it stands now.
      const seen = outcome.row?.next_free as number | null | undefined;
      if (typeof seen === "number") this.expected = seen;
    }
  }

  private async read(): Promise<number | typeof absent> {
    const row = await this.cql.row("SELECT next_free FROM id_blocks WHERE sequence = ?", [this.sequence], { serial: true });
    return (row?.next_free as number | undefined) ?? absent;
  }
}

// One mailbox per key: work for the same key runs strictly one after another, work for different
// keys runs concurrently. This is how an actor owns its key without locks in handlers.
export class Mailboxes {
  private readonly tails = new Map<string | number, Promise<unknown>>();

  /** Runs `work` after every earlier task of the same key has settled; resolves with its result. */
  run<T>(key: string | number, work: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(work, work);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** Resolves once every task queued so far has settled (used when stopping). */
  async drain(): Promise<void> {
    await Promise.all([...this.tails.values()]);
  }
}

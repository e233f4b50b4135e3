// A mailbox per key: work for the same key runs strictly one after another, work for different
// keys runs concurrently. This is how an actor owns its key without locks in handlers.

/** One key's mailbox. */
export class Mailbox {
  private tail: Promise<unknown> = Promise.resolve();
  private queued = 0;

  /** Runs `work` after every task queued before it has settled; resolves with its result. */
  run<T>(work: () => Promise<T>): Promise<T> {
    this.queued += 1;
    const result = this.tail.then(work, work);
    this.tail = result.then(
      () => (this.queued -= 1),
      () => (this.queued -= 1),
    );
    return result;
  }

  /** Nothing is queued: whoever holds the mailbox may drop it. */
  get idle(): boolean {
    return this.queued === 0;
  }

  /** Resolves once every task queued so far has settled. */
  settled(): Promise<unknown> {
    return this.tail;
  }
}

/** Mailboxes by key, each kept only while it has work. */
export class Mailboxes {
  private readonly boxes = new Map<string | number, Mailbox>();

  /** Runs `work` after every earlier task of the same key has settled; resolves with its result. */
  run<T>(key: string | number, work: () => Promise<T>): Promise<T> {
    let box = this.boxes.get(key);
    if (!box) {
      box = new Mailbox();
      this.boxes.set(key, box);
    }
    const result = box.run(work);
    const queuedIn = box;
    void queuedIn.settled().then(() => {
      if (queuedIn.idle && this.boxes.get(key) === queuedIn) this.boxes.delete(key);
    });
    return result;
  }

  /** Resolves once every task queued so far has settled (used when stopping). */
  async drain(): Promise<void> {
    await Promise.all([...this.boxes.values()].map((box) => box.settled()));
  }
}

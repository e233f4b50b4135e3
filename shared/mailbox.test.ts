import { expect } from "chai";
import { Mailbox, Mailboxes } from "./mailbox.js";

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("mailboxes", () => {
  it("runs one key's work one after another, a failure not stopping what follows, and other keys' at once", async () => {
    const mailboxes = new Mailboxes();
    const log: string[] = [];
    let release!: () => void;
    const first = mailboxes.run("a", () => new Promise<void>((resolve) => (release = resolve)).then(() => void log.push("a1")));
    const failing = mailboxes.run("a", async () => {
      log.push("a2");
      throw new Error("a2 failed");
    });
    const third = mailboxes.run("a", async () => void log.push("a3"));
    await mailboxes.run("b", async () => void log.push("b1"));
    expect(log).to.deep.equal(["b1"]);
    release();
    await first;
    expect(await failing.catch((err: Error) => err.message)).to.equal("a2 failed");
    await third;
    expect(log).to.deep.equal(["b1", "a1", "a2", "a3"]);
  });

  it("drains: resolves once everything queued so far has settled", async () => {
    const mailboxes = new Mailboxes();
    let done = 0;
    for (const key of ["a", "a", "b"]) void mailboxes.run(key, async () => {
      await tick();
      done += 1;
    });
    await mailboxes.drain();
    expect(done).to.equal(3);
  });

  it("says a mailbox is idle only once its last task has settled", async () => {
    const mailbox = new Mailbox();
    expect(mailbox.idle).to.equal(true);
    let release!: () => void;
    const running = mailbox.run(() => new Promise<void>((resolve) => (release = resolve)));
    expect(mailbox.idle).to.equal(false);
    await tick();
    expect(mailbox.idle).to.equal(false);
    release();
    await running;
    await mailbox.settled();
    expect(mailbox.idle).to.equal(true);
  });
});

import { expect } from "chai";
import { StartupTimings } from "./startup-timings.js";

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("StartupTimings", () => {
  it("names the slow steps, slowest first, and leaves out the quick ones", async () => {
    const timings = new StartupTimings();
    timings.next("store");
    timings.next("mesh");
    await pause(120);
    timings.next("services");
    await pause(250);
    timings.end();
    const line = timings.describe();
    expect(line).to.match(/^started in 0\.[3-9] s: services 0\.\d s, mesh 0\.\d s$/);
    expect(line).not.to.contain("store");
  });

  it("tells, while a start is under way, the step it is in and the services still starting", async () => {
    const timings = new StartupTimings();
    timings.next("services");
    let release = () => {};
    const hanging = timings.service({ name: "systemAgent", started: () => new Promise<void>((resolve) => (release = resolve)) });
    const starting = (hanging.started as () => Promise<void>).call({});
    await pause(150);
    expect(timings.describe()).to.match(/^starting for 0\.\d s: in services for 0\.\d s; services still starting: systemAgent 0\.\d s$/);
    release();
    await starting;
    timings.end();
    expect(timings.describe()).to.match(/^started in 0\.\d s: services 0\.\d s; slowest service starts: systemAgent 0\.\d s$/);
  });

  it("calls a timed started handler on the service, and keeps its failure", async () => {
    const timings = new StartupTimings();
    const seen: unknown[] = [];
    const service = { name: "media" };
    const timed = timings.service({
      name: "media",
      started(this: unknown) {
        seen.push(this);
      },
    });
    await (timed.started as (this: unknown) => Promise<void>).call(service);
    expect(seen).to.deep.equal([service]);
    const failing = timings.service({
      name: "broken",
      started() {
        throw new Error("no store");
      },
    });
    await (failing.started as (this: unknown) => Promise<void>).call(service).then(
      () => expect.fail("the failure was swallowed"),
      (err: Error) => expect(err.message).to.equal("no store"),
    );
  });

  it("leaves a schema without a started handler as it is", () => {
    const schema = { name: "plain", actions: {} };
    expect(new StartupTimings().service(schema)).to.equal(schema);
  });
});

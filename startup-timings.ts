// Where a node's start spends its time. A start that takes long (a slow store, a Kafka group join, a
// mesh peer not heard from, a lease another process holds) is otherwise silent until an
// orchestrator's probe gives up: the node logs each step's wall time, and each service's start
// handler's (they run in parallel inside the broker's start), at warn when the whole took longer
// than `slowStartMs`, at info otherwise. A caller that starts nodes (the test cluster) passes its
// own instance and reads where a start that has not ended is (`describe` while it runs).
import type { ServiceSchema } from "moleculer";

/** A start slower than this is logged at warn: every step of a healthy start takes well under it. */
export const slowStartMs = 10_000;

type Step = [name: string, ms: number];

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

export class StartupTimings {
  private readonly beganAt = performance.now();
  private current: { name: string; beganAt: number } | undefined;
  private readonly steps: Step[] = [];
  private readonly services: Step[] = [];
  private readonly servicesStarting = new Map<string, number>();
  private endedAt: number | undefined;

  /** Ends the step under way, if any, and begins `name`. */
  next(name: string): void {
    const now = performance.now();
    if (this.current) this.steps.push([this.current.name, now - this.current.beganAt]);
    this.current = { name, beganAt: now };
  }

  /** Ends the step under way: the node serves. */
  end(): void {
    if (this.current) this.next("");
    this.current = undefined;
    this.endedAt = performance.now();
  }

  /** The schema with its started handler timed under the service's name. */
  service<S extends ServiceSchema>(schema: S): S {
    const started = schema.started;
    if (typeof started !== "function") return schema;
    const { services, servicesStarting } = this;
    return {
      ...schema,
      async started(this: ThisParameterType<typeof started>) {
        const beganAt = performance.now();
        servicesStarting.set(schema.name, beganAt);
        try {
          await started.call(this);
        } finally {
          servicesStarting.delete(schema.name);
          services.push([schema.name, performance.now() - beganAt]);
        }
      },
    };
  }

  get elapsedMs(): number {
    return (this.endedAt ?? performance.now()) - this.beganAt;
  }

  /**
   * One line: the whole, every step of 100 ms or more and the slowest service starts; while the
   * start is under way, also the step it is in and the services still starting.
   */
  describe(): string {
    const now = performance.now();
    const notable = (steps: Step[]) => steps.filter(([, ms]) => ms >= 100).sort((a, b) => b[1] - a[1]);
    const named = (steps: Step[]) => steps.map(([name, ms]) => `${name} ${seconds(ms)}`).join(", ");
    const parts: string[] = [];
    if (this.current) parts.push(`in ${this.current.name} for ${seconds(now - this.current.beganAt)}`);
    if (this.servicesStarting.size > 0) parts.push(`services still starting: ${named([...this.servicesStarting].map(([name, beganAt]) => [name, now - beganAt]))}`);
    const steps = notable(this.steps);
    if (steps.length > 0) parts.push(named(steps));
    const services = notable(this.services).slice(0, 3);
    if (services.length > 0) parts.push(`slowest service starts: ${named(services)}`);
    const head = this.endedAt === undefined ? `starting for ${seconds(this.elapsedMs)}` : `started in ${seconds(this.elapsedMs)}`;
    return parts.length > 0 ? `${head}: ${parts.join("; ")}` : head;
  }
}

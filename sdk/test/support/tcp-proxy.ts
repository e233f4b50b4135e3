// A TCP proxy between a client under test and the server, standing in for the network: it can
// cut every connection (both ends see it end), refuse new ones, or silently stop carrying bytes
// while connections stay open (what a dead NAT or a pulled cable looks like to both ends).
import { connect, createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";

export class TcpProxy {
  private readonly pairs = new Set<[Socket, Socket]>();
  private refusing = false;
  private swallowing = false;
  /** Connections accepted so far. */
  accepted = 0;

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(targetPort: number): Promise<TcpProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const proxy = new TcpProxy(server, (server.address() as AddressInfo).port);
    server.on("connection", (client) => proxy.accept(client, targetPort));
    return proxy;
  }

  get url(): string {
    return `ws://127.0.0.1:${this.port}/ws`;
  }

  private accept(client: Socket, targetPort: number): void {
    if (this.refusing) {
      client.destroy();
      return;
    }
    this.accepted += 1;
    const upstream = connect(targetPort, "127.0.0.1");
    const pair: [Socket, Socket] = [client, upstream];
    this.pairs.add(pair);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (data) => {
      if (!this.swallowing) upstream.write(data);
    });
    upstream.on("data", (data) => {
      if (!this.swallowing) client.write(data);
    });
    for (const socket of pair) {
      socket.on("close", end);
      socket.on("error", end);
    }
  }

  /** Ends every open connection at once; with `refuse`, new connections are refused until restore(). */
  cut(options: { refuse?: boolean } = {}): void {
    this.refusing = options.refuse ?? false;
    for (const [client, upstream] of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  /** Stops carrying bytes in both directions; connections stay open. */
  blackhole(): void {
    this.swallowing = true;
  }

  /** Carries bytes and accepts connections again. */
  restore(): void {
    this.swallowing = false;
    this.refusing = false;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

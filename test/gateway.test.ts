import { expect } from "chai";
import { Errors } from "../shared/errors.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { ClientFrameType, ServerFrameType } from "../shared/gen/api/v1/gateway_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { signInAnotherDevice, signInWithCode } from "./support/accounts.js";
import { client, freshEmail, lastCode, socketDrivers, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { GatewayClient } from "./support/ws-client.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { device } from "./support/accounts.js";

const isFatalError = (errorName: string) => (f: import("../shared/gen/api/v1/gateway_pb.js").ServerFrame) =>
  f.type === ServerFrameType.ERROR && f.payload.case === "error" && f.payload.value.fatal && f.payload.value.error?.errorName === errorName;

for (const driver of socketDrivers)
for (const mode of wireModes) {
  describe(`WebSocket gateway /ws (${mode} frames, ${driver} driver)`, () => {
    let server: TestServer;
    const open: GatewayClient[] = [];
    before(async () => {
      server = await startTestServer({ env: { SOCKET_DRIVER: driver } });
    });
    afterEach(() => {
      for (const c of open.splice(0)) c.close();
    });
    after(async () => server.dispose());

    async function connect(): Promise<GatewayClient> {
      const c = await GatewayClient.connect(server.url, mode);
      open.push(c);
      return c;
    }

    it("authenticates a user token and answers in the client's frame form", async () => {
      const user = await signInWithCode(server, mode);
      const ws = await connect();
      const answer = await ws.authenticate(user.accessToken);
      expect(answer.type).to.equal(ServerFrameType.AUTH_RESPONSE);
      expect(answer.payload.case === "authResponse" && answer.payload.value).to.deep.include({ success: true, userId: user.userId });
    });

    it("refuses a revoked or unknown token", async () => {
      const ws = await connect();
      const answer = await ws.authenticate("nxs_unknown");
      expect(answer.payload.case === "authResponse" && answer.payload.value.success).to.equal(false);
      expect(answer.payload.case === "authResponse" && answer.payload.value.error?.errorName).to.equal(Errors.unauthenticated.errorName);
      await ws.closed;
    });

    it("answers a heartbeat with the server time", async () => {
      const user = await signInWithCode(server, mode);
      const ws = await connect();
      await ws.authenticate(user.accessToken);
      const requestId = ws.send({ requestId: 77n, type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
      const pong = await ws.next((f) => f.requestId === requestId && f.type === ServerFrameType.HEARTBEAT_PONG);
      expect(pong.payload.case === "heartbeatPong" && Number(pong.payload.value.serverTime)).to.be.closeTo(Date.now(), 5000);
    });

    it("pushes every new update of the user live to each of the user's connections, with its sn", async () => {
      const user = await signInWithCode(server, mode);
      const second = await signInAnotherDevice(server, user.email);
      const other = await signInWithCode(server, mode);
      const [a, b, c] = [await connect(), await connect(), await connect()];
      await a.authenticate(user.accessToken);
      await b.authenticate(second.accessToken);
      await c.authenticate(other.accessToken);
      const users = client(server, UserService, mode, user.accessToken);
      for (let i = 1; i <= 20; i++) await users.updateProfile({ nickname: `live ${i}` });
      await a.next((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.sn === 20);
      await b.next((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.sn === 20);
      expect(a.pushedSns()).to.deep.equal(Array.from({ length: 20 }, (_, i) => i + 1));
      expect(b.pushedSns()).to.deep.equal(a.pushedSns());
      const frame = a.frames.find((f) => f.payload.case === "update")!;
      expect(frame.type).to.equal(ServerFrameType.UPDATE);
      const update = frame.payload.case === "update" ? frame.payload.value : undefined;
      expect(update?.users.map((u) => u.userId)).to.deep.equal([user.userId]);
      expect(c.pushedSns()).to.deep.equal([]);
      const ids = a.frames.filter((f) => f.type === ServerFrameType.UPDATE).map((f) => f.requestId);
      expect(new Set(ids).size).to.equal(ids.length);
      // What was pushed is exactly what GetDifference answers.
      const diff = await client(server, SyncService, mode, user.accessToken).getDifference({ sn: 0 });
      expect(diff.updates.map((u) => u.sn)).to.deep.equal(a.pushedSns());
    });

    for (const [name, revoke] of [
      ["Logout", async (s: TestServer, token: string) => client(s, AuthService, mode, token).logout({})],
      ["LogoutAll", async (s: TestServer, token: string) => client(s, AuthService, mode, token).logoutAll({})],
    ] as const) {
      it(`closes the connection with a fatal error frame on ${name}`, async () => {
        const user = await signInWithCode(server, mode);
        const ws = await connect();
        await ws.authenticate(user.accessToken);
        await revoke(server, user.accessToken);
        await ws.next(isFatalError("SESSION_REVOKED"));
        await ws.closed;
      });
    }

    it("closes only the removed device's connection on RemoveDevice", async () => {
      const user = await signInWithCode(server, mode);
      const second = await signInAnotherDevice(server, user.email);
      const [kept, removed] = [await connect(), await connect()];
      await kept.authenticate(user.accessToken);
      await removed.authenticate(second.accessToken);
      await client(server, UserService, mode, user.accessToken).removeDevice({ deviceId: second.deviceId });
      await removed.next(isFatalError("SESSION_REVOKED"));
      await removed.closed;
      const pong = kept.send({ type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
      await kept.next((f) => f.requestId === pong);
    });

    it("closes other devices' connections on ChangePassword and every connection on a password reset", async () => {
      const user = await signInWithCode(server, mode);
      await client(server, AuthService, mode, user.accessToken).setupPassword({ newPassword: "first password 1" });
      const second = await signInAnotherDevice(server, user.email);
      const [current, other] = [await connect(), await connect()];
      await current.authenticate(user.accessToken);
      await other.authenticate(second.accessToken);
      await client(server, AuthService, mode, user.accessToken).changePassword({ oldPassword: "first password 1", newPassword: "second password 2" });
      await other.next(isFatalError("SESSION_REVOKED"));
      server.clock.advance(61_000);
      const auth = client(server, AuthService, mode);
      const { verifyToken } = await auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: user.email });
      const { resetToken } = await auth.resetPasswordVerify({ verifyToken, code: lastCode(server, user.email, "reset") });
      await auth.resetPasswordConfirm({ resetToken, newPassword: "third password 3" });
      await current.next(isFatalError("SESSION_REVOKED"));
      await current.closed;
    });

    it("requires the first frame to authenticate", async () => {
      const ws = await connect();
      ws.send({ type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
      await ws.next(isFatalError("GATEWAY_AUTH_REQUIRED"));
      await ws.closed;
    });

    it("keeps serving after an undecodable frame once authenticated", async () => {
      const user = await signInWithCode(server, mode);
      const ws = await connect();
      await ws.authenticate(user.accessToken);
      ws.socket.send(mode === "json" ? "{not json" : new Uint8Array([0xff, 0xff, 0xff]));
      await ws.next((f) => f.type === ServerFrameType.ERROR && f.payload.case === "error" && !f.payload.value.fatal);
      const pong = ws.send({ type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
      await ws.next((f) => f.requestId === pong);
    });

    if (mode === "json") {
      it("refuses a JSON frame whose int64 is not in proto3 JSON form, and takes the same frame in decimal", async () => {
        const user = await signInWithCode(server, mode);
        const ws = await connect();
        await ws.authenticate(user.accessToken);
        for (const requestId of ['"0x10"', '" 12"', '"1e3"', '""', "1e300"]) {
          ws.socket.send(`{"requestId":${requestId},"type":"CLIENT_FRAME_TYPE_HEARTBEAT_PING","heartbeatPing":{}}`);
          const error = await ws.next((f) => f.type === ServerFrameType.ERROR);
          expect(error.payload.case === "error" && error.payload.value.error?.errorName, requestId).to.equal(Errors.gatewayBadFrame.errorName);
          expect(error.payload.case === "error" && error.payload.value.fatal).to.equal(false);
        }
        ws.socket.send('{"requestId":"16","type":"CLIENT_FRAME_TYPE_HEARTBEAT_PING","heartbeatPing":{}}');
        await ws.next((f) => f.requestId === 16n && f.type === ServerFrameType.HEARTBEAT_PONG);
      });
    }

    it("a client that reconnects recovers missed updates with GetDifference", async () => {
      const email = freshEmail();
      const auth = client(server, AuthService, mode);
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const user = await auth.verifyCode({ verifyToken, code: lastCode(server, email), deviceInfo: device() });
      const ws = await connect();
      await ws.authenticate(user.accessToken);
      const users = client(server, UserService, mode, user.accessToken);
      await users.updateProfile({ nickname: "one" });
      await ws.next((f) => f.payload.case === "update");
      ws.close();
      await ws.closed;
      await users.updateProfile({ nickname: "two" });
      await users.updateProfile({ nickname: "three" });
      const diff = await client(server, SyncService, mode, user.accessToken).getDifference({ sn: 1 });
      expect(diff.updates.map((u) => u.sn)).to.deep.equal([2, 3]);
    });
  });
}

// The API tier and the engine in two brokers joined by Moleculer's TCP transporter: every action
// parameter, result, error and bus event crosses a real serializer and socket.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { MediaService } from "../shared/gen/api/v1/media_pb.js";
import { MediaPurpose } from "../shared/gen/shared/v1/media_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { ServerFrameType } from "../shared/gen/api/v1/gateway_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import type { Parley } from "../server.js";
import { device } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, freshEmail, lastCode, startTwoNodes, wireModes, type TestServer } from "./support/harness.js";
import { GatewayClient } from "./support/ws-client.js";

describe("API tier and engine on two brokers over the TCP transporter", () => {
  let edge: Parley;
  let engine: Parley;
  let dataDir: string;
  let codesFile: string;

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-distributed-"));
    ({ edge, engine, codesFile } = await startTwoNodes(dataDir, "distributed"));
  });

  after(async () => {
    await edge?.stop();
    await engine?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("runs no engine service on the edge node", () => {
    const local = edge.broker.services.map((s) => s.name).filter((name) => !name.startsWith("$")).sort();
    expect(local).to.deep.equal(["api", "gateway", "identityCache"]);
  });

  for (const mode of wireModes) {
    it(`carries a 5 MB upload and its download across nodes, over Moleculer's default packet limit (${mode})`, async () => {
      const asServer = { url: edge.url, codesFile } as TestServer;
      const auth = client(edge, AuthService, mode);
      const email = freshEmail("distributed-upload");
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const { accessToken } = await auth.verifyCode({ verifyToken, code: lastCode(asServer, email), deviceInfo: device() });
      const data = randomBytes(5 * 1024 * 1024);
      const media = client(edge, MediaService, mode, accessToken);
      const { file } = await media.uploadFile({ fileName: "big.bin", contentType: "application/octet-stream", purpose: MediaPurpose.MESSAGE, data });
      expect(file?.size).to.equal(BigInt(data.length));
      const { url } = await media.getDownloadURL({ fileId: file!.fileId });
      const downloaded = await fetch(url.startsWith("http") ? url : `${edge.url}${url}`);
      expect(downloaded.status).to.equal(200);
      expect(Buffer.from(await downloaded.arrayBuffer()).equals(data)).to.equal(true);
    });

    it(`serves sign-in, profile events, the update stream, live push and revocation across nodes (${mode})`, async () => {
      const asServer = { url: edge.url, codesFile } as TestServer;
      const auth = client(edge, AuthService, mode);
      const email = freshEmail("distributed");
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const signed = await auth.verifyCode({ verifyToken, code: lastCode(asServer, email), deviceInfo: device() });
      expect(signed.isNewUser).to.equal(true);
      expect(typeof signed.user?.createdAt).to.equal("bigint");

      const ws = await GatewayClient.connect(edge.url, mode);
      const authAnswer = await ws.authenticate(signed.accessToken);
      expect(authAnswer.payload.case === "authResponse" && authAnswer.payload.value.userId).to.equal(signed.userId);

      const users = client(edge, UserService, mode, signed.accessToken);
      await users.updateProfile({ nickname: "over the wire" });
      await users.updateProfile({ signature: "still dense" });
      await ws.next((f) => f.type === ServerFrameType.UPDATE && f.payload.case === "update" && f.payload.value.update.value?.$typeName === "shared.v1.SnUpdate" && (f.payload.value.update.value as { sn: number }).sn === 2);
      expect(ws.pushedSns()).to.deep.equal([1, 2]);

      const diff = await client(edge, SyncService, mode, signed.accessToken).getDifference({ sn: 0 });
      expect(diff.updates.map((u) => u.sn)).to.deep.equal([1, 2]);

      // A business error thrown on the engine node keeps its catalogue entry on the edge.
      await expectError(users.setUsername({ username: "u_12345" }), Errors.invalidUsername);

      await client(edge, AuthService, mode, signed.accessToken).logout({});
      await ws.next((f) => f.type === ServerFrameType.ERROR && f.payload.case === "error" && f.payload.value.error?.errorName === "SESSION_REVOKED");
      await ws.closed;
      await expectError(users.getProfile({}), Errors.unauthenticated);
    });
  }
});

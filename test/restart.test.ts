import { expect } from "chai";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { PushPlatform } from "../shared/gen/api/v1/common_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { device, signInAnotherDevice, signInWithCode } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";

describe("restart durability", () => {
  let server: TestServer;
  after(async () => server.dispose());

  it("keeps every account, session, password, username, push token and update across a restart", async () => {
    server = await startTestServer();
    const user = await signInWithCode(server);
    const other = await signInAnotherDevice(server, user.email);
    const users = client(server, UserService, "json", user.accessToken);
    await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: "durable password 1" });
    await users.setUsername({ username: `durable_${process.pid}` });
    for (let i = 0; i < 5; i++) await users.updateProfile({ nickname: `n${i}` });
    await client(server, PushService, "json", user.accessToken).registerToken({ deviceId: user.deviceId, token: "apns-1", platform: PushPlatform.APNS });
    const before = await client(server, SyncService, "json", user.accessToken).getDifference({ sn: 0 });

    server = await server.restart();

    const after = client(server, UserService, "json", user.accessToken);
    const { profile } = await after.getProfile({});
    expect(profile).to.deep.include({ userId: user.userId, nickname: "n4", username: `durable_${process.pid}`, hasPassword: true, canChangeUsername: false });
    expect((await after.listDevices({})).devices.map((d) => d.deviceId).sort()).to.deep.equal([user.deviceId, other.deviceId].sort());
    const diff = await client(server, SyncService, "json", user.accessToken).getDifference({ sn: 0 });
    expect(diff.updates).to.deep.equal(before.updates);
    expect(diff.sn).to.equal(6);
    // The stream continues densely after the restart.
    await after.updateProfile({ nickname: "after restart" });
    expect((await client(server, SyncService, "json", user.accessToken).getCurrentState({})).state?.latestSn).to.equal(7);
    await client(server, AuthService, "json").refreshToken({ refreshToken: other.refreshToken });
    await client(server, AuthService, "json").loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "durable password 1", deviceInfo: device() });
    await client(server, PushService, "json", user.accessToken).unregisterToken({ deviceId: user.deviceId });
  });
});

import { expect } from "chai";
import { AccountType } from "../shared/gen/shared/v1/common_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { signInAnotherDevice, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";

for (const mode of wireModes) {
  describe(`UserService (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const users = (user: SignedIn) => client(server, UserService, mode, user.accessToken);
    const sync = (user: SignedIn) => client(server, SyncService, mode, user.accessToken);
    let usernameCounter = 0;
    const freshUsername = () => `name_${mode}_${process.pid}_${++usernameCounter}`.slice(0, 32);

    describe("GetProfile", () => {
      it("answers the caller's own view with private fields", async () => {
        const user = await signInWithCode(server, mode);
        const { profile } = await users(user).getProfile({});
        expect(profile?.userId).to.equal(user.userId);
        expect(profile?.email).to.equal(user.email);
        expect(profile?.phone).to.equal(undefined);
        expect(Number(profile?.createdAt)).to.be.closeTo(server.clock.now(), 60_000);
      });

      it("answers UNAUTHENTICATED for an invalid token", async () => {
        await expectError(client(server, UserService, mode, "nxs_nope").getProfile({}), Errors.unauthenticated);
      });
    });

    describe("UpdateProfile", () => {
      it("changes only the provided fields and puts only the changed ones in UserProfileUpdatedEvent on the own stream", async () => {
        const user = await signInWithCode(server, mode);
        const base = (await sync(user).getCurrentState({})).state!.latestSn;
        const { profile } = await users(user).updateProfile({ nickname: "Ada", signature: "hello" });
        expect(profile?.nickname).to.equal("Ada");
        expect(profile?.signature).to.equal("hello");
        expect(profile?.avatarUrl).to.equal("");
        await users(user).updateProfile({ nickname: "Ada", avatarUrl: "https://cdn.example.com/a.png" });
        const diff = await sync(user).getDifference({ sn: base });
        expect(diff.updates.map((u) => u.sn)).to.deep.equal([base + 1, base + 2]);
        const [first, second] = diff.updates.map((u) => u.update);
        expect(first.case).to.equal("userProfileUpdated");
        if (first.case !== "userProfileUpdated" || second.case !== "userProfileUpdated") throw new Error("unexpected update");
        expect(first.value).to.include({ userId: user.userId, newNickname: "Ada", newSignature: "hello" });
        expect(first.value.newAvatarUrl).to.equal(undefined);
        expect(second.value.newNickname).to.equal(undefined);
        expect(second.value.newAvatarUrl).to.equal("https://cdn.example.com/a.png");
      });

      it("produces no event when nothing changes", async () => {
        const user = await signInWithCode(server, mode);
        await users(user).updateProfile({ nickname: "Same" });
        const base = (await sync(user).getCurrentState({})).state!.latestSn;
        await users(user).updateProfile({ nickname: "Same" });
        expect((await sync(user).getCurrentState({})).state!.latestSn).to.equal(base);
      });

      it("answers INVALID_ARGUMENT for a nickname over 64 or a signature over 200 characters, changing nothing", async () => {
        const user = await signInWithCode(server, mode);
        await expectError(users(user).updateProfile({ nickname: "n".repeat(65) }), Errors.invalidArgument);
        await expectError(users(user).updateProfile({ nickname: "ok", signature: "s".repeat(201) }), Errors.invalidArgument);
        await expectError(users(user).updateProfile({ avatarUrl: "u".repeat(2049) }), Errors.invalidArgument);
        const { profile } = await users(user).getProfile({});
        expect(profile?.nickname).to.not.equal("ok");
        // Bounds count characters, not bytes: 64 emoji are a valid nickname.
        await users(user).updateProfile({ nickname: "😀".repeat(64) });
      });

      it("does not put the update on other users' streams", async () => {
        const alice = await signInWithCode(server, mode);
        const bob = await signInWithCode(server, mode);
        const bobBase = (await sync(bob).getCurrentState({})).state!.latestSn;
        await users(alice).updateProfile({ nickname: "Alice" });
        expect((await sync(bob).getCurrentState({})).state!.latestSn).to.equal(bobBase);
      });
    });

    describe("ListDevices and RemoveDevice", () => {
      it("lists active sessions with the current one marked", async () => {
        const first = await signInWithCode(server, mode);
        const second = await signInAnotherDevice(server, first.email);
        const { devices } = await users(first).listDevices({});
        expect(devices).to.have.length(2);
        const current = devices.find((d) => d.isCurrent);
        expect(current?.deviceId).to.equal(first.deviceId);
        const other = devices.find((d) => d.deviceId === second.deviceId);
        expect(other?.isCurrent).to.equal(false);
        expect(other?.loginIp).to.equal("127.0.0.1");
        expect(other?.deviceName).to.equal("test runner");
      });

      it("RemoveDevice revokes that device's tokens", async () => {
        const first = await signInWithCode(server, mode);
        const second = await signInAnotherDevice(server, first.email);
        await users(first).removeDevice({ deviceId: second.deviceId });
        await expectError(users(second).getProfile({}), Errors.unauthenticated);
        const { devices } = await users(first).listDevices({});
        expect(devices.map((d) => d.deviceId)).to.deep.equal([first.deviceId]);
      });

      it("answers INVALID_ARGUMENT for the current device and NOT_FOUND for an unknown or foreign device", async () => {
        const alice = await signInWithCode(server, mode);
        const bob = await signInWithCode(server, mode);
        await expectError(users(alice).removeDevice({ deviceId: alice.deviceId }), Errors.cannotRemoveCurrentDevice);
        await expectError(users(alice).removeDevice({ deviceId: "no-such-device" }), Errors.deviceNotFound);
        await expectError(users(alice).removeDevice({ deviceId: bob.deviceId }), Errors.deviceNotFound);
        expect((await users(bob).getProfile({})).profile?.userId).to.equal(bob.userId);
        await expectError(users(alice).removeDevice({ deviceId: "" }), Errors.invalidArgument);
      });
    });

    describe("SetUsername", () => {
      it("sets a username once, emits UsernameChangedEvent, and makes it resolvable", async () => {
        const user = await signInWithCode(server, mode);
        const name = freshUsername();
        const base = (await sync(user).getCurrentState({})).state!.latestSn;
        const { profile } = await users(user).setUsername({ username: name });
        expect(profile?.username).to.equal(name);
        expect(profile?.canChangeUsername).to.equal(false);
        const diff = await sync(user).getDifference({ sn: base });
        expect(diff.updates).to.have.length(1);
        expect(diff.updates[0].update).to.deep.include({ case: "usernameChanged" });
        if (diff.updates[0].update.case === "usernameChanged") expect(diff.updates[0].update.value.newUsername).to.equal(name);
        await expectError(users(user).setUsername({ username: freshUsername() }), Errors.usernameAlreadySet);
        const other = await signInWithCode(server, mode);
        const resolved = await users(other).resolveUsername({ username: name });
        expect(resolved.user?.userId).to.equal(user.userId);
        expect(resolved.user?.accountType).to.equal(AccountType.USER);
        expect(resolved.isContact).to.equal(false);
      });

      it("answers ALREADY_EXISTS for a taken username", async () => {
        const first = await signInWithCode(server, mode);
        const second = await signInWithCode(server, mode);
        const name = freshUsername();
        await users(first).setUsername({ username: name });
        await expectError(users(second).setUsername({ username: name }), Errors.usernameTaken);
        expect((await users(second).getProfile({})).profile?.canChangeUsername).to.equal(true);
      });

      it("answers INVALID_ARGUMENT for format violations", async () => {
        const user = await signInWithCode(server, mode);
        for (const bad of ["Upper_case", "has-dash", "with space", "ünï_code", "u_12345"]) {
          await expectError(users(user).setUsername({ username: bad }), Errors.invalidUsername);
        }
        await expectError(users(user).setUsername({ username: "abcd" }), Errors.invalidArgument);
        await expectError(users(user).setUsername({ username: "a".repeat(33) }), Errors.invalidArgument);
      });
    });

    describe("ResolveUsername", () => {
      it("resolves generated usernames and answers NOT_FOUND for unknown ones", async () => {
        const user = await signInWithCode(server, mode);
        const resolved = await users(user).resolveUsername({ username: `u_${user.userId}` });
        expect(resolved.user?.userId).to.equal(user.userId);
        await expectError(users(user).resolveUsername({ username: "nobody_here_at_all" }), Errors.userNotFound);
      });

      it("never reveals phone or email", async () => {
        const user = await signInWithCode(server, mode);
        const resolved = await users(user).resolveUsername({ username: `u_${user.userId}` });
        expect(JSON.stringify(resolved)).to.not.include(user.email);
      });
    });

    describe("BatchGetUserInfo", () => {
      it("answers the existing users keyed by id and omits unknown ids", async () => {
        const alice = await signInWithCode(server, mode);
        const bob = await signInWithCode(server, mode);
        const { users: found } = await users(alice).batchGetUserInfo({ userIds: [alice.userId, bob.userId, 99_999_999, bob.userId] });
        expect(Object.keys(found).map(Number).sort()).to.deep.equal([alice.userId, bob.userId].sort());
        expect(found[bob.userId].userId).to.equal(bob.userId);
      });

      it("answers INVALID_ARGUMENT for an empty list or more than 200 ids", async () => {
        const user = await signInWithCode(server, mode);
        await expectError(users(user).batchGetUserInfo({ userIds: [] }), Errors.invalidArgument);
        await expectError(users(user).batchGetUserInfo({ userIds: Array.from({ length: 201 }, (_, i) => i + 1) }), Errors.invalidArgument);
        const { users: found } = await users(user).batchGetUserInfo({ userIds: Array.from({ length: 200 }, (_, i) => user.userId - i) });
        expect(found[user.userId]?.userId).to.equal(user.userId);
      });
    });
  });
}

import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MediaPurpose, MediaService } from "../shared/gen/api/v1/media_pb.js";
import { MessageService, MessageType } from "../shared/gen/api/v1/message_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors } from "../shared/errors.js";
import { device, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer, type WireMode } from "./support/harness.js";

/** The rule a call was refused by, or undefined when it was not refused for a rule. */
async function refusedRule(call: Promise<unknown>): Promise<{ rule: string; field: string } | undefined> {
  try {
    await call;
    return undefined;
  } catch (err) {
    if (!(err instanceof ConnectError) || err.code !== Code.InvalidArgument) return undefined;
    const metadata = err.findDetails(ErrorDetailSchema)[0]?.metadata ?? {};
    return metadata.rule ? { rule: metadata.rule, field: metadata.field } : undefined;
  }
}

// C0 (NUL, BEL, TAB, LF), DEL and C1 (NEL, APC).
const controlCharacters = ["\u0000", "\u0007", "\t", "\n", "\u007f", "\u0085", "\u009f"];

describe("names refuse control characters", () => {
  let server: TestServer;
  let user: SignedIn;
  before(async () => {
    server = await startTestServer();
    user = await signInWithCode(server);
  });
  after(async () => server.dispose());

  let counter = 0;
  const unique = (prefix: string) => `${prefix}${process.pid % 1000}x${++counter}`;

  /** Every name field a client sets, each reached through an RPC that takes it. */
  const cases: { field: string; call: (mode: WireMode, name: string) => Promise<unknown> }[] = [
    { field: "nickname", call: (mode, name) => client(server, UserService, mode, user.accessToken).updateProfile({ nickname: name }) },
    { field: "username", call: (mode, name) => client(server, UserService, mode, user.accessToken).setUsername({ username: name }) },
    { field: "username", call: (mode, name) => client(server, UserService, mode, user.accessToken).resolveUsername({ username: name }) },
    { field: "username", call: (mode, name) => client(server, AgentService, mode, user.accessToken).createAgent({ username: name, name: "Agent" }) },
    { field: "name", call: (mode, name) => client(server, AgentService, mode, user.accessToken).createAgent({ username: unique("agent_"), name }) },
    {
      field: "commands.items.command",
      call: (mode, name) =>
        client(server, AgentService, mode, user.accessToken).setAgentConfig({ agentUserId: 1, commands: { items: [{ command: name, description: "d" }] } }),
    },
    { field: "name", call: (mode, name) => client(server, GroupService, mode, user.accessToken).createGroup({ name, memberIds: [1, 2] }) },
    { field: "name", call: (mode, name) => client(server, GroupService, mode, user.accessToken).updateGroupName({ groupId: 1, name }) },
    { field: "alias", call: (mode, name) => client(server, ContactService, mode, user.accessToken).updateContactAlias({ contactUserId: 1, alias: name }) },
    {
      field: "device_info.device_name",
      call: (mode, name) => client(server, AuthService, mode).verifyCode({ verifyToken: "ply_v_x", code: "123456", deviceInfo: device(undefined, { deviceName: name }) }),
    },
    {
      field: "file_name",
      call: (mode, name) => client(server, MediaService, mode, user.accessToken).initUpload({ fileName: name, contentType: "text/plain", size: 1n }),
    },
    {
      field: "file_name",
      call: (mode, name) =>
        client(server, MediaService, mode, user.accessToken).uploadFile({ fileName: name, contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: new Uint8Array([1]) }),
    },
    {
      field: "body.file.filename",
      call: (mode, name) =>
        client(server, MessageService, mode, user.accessToken).sendMessage({
          clientMessageId: 1n,
          conversationId: 1n,
          body: { type: MessageType.FILE, content: { case: "file", value: { fileId: "f", filename: name } } },
        }),
    },
  ];

  for (const mode of wireModes) {
    it(`answers INVALID_ARGUMENT naming the field for C0, DEL and C1 characters in every name (${mode})`, async () => {
      for (const { field, call } of cases) {
        for (const control of controlCharacters) {
          const refused = await refusedRule(call(mode, unique(`ab${control}cd`)));
          expect(refused, `${field} with U+${control.codePointAt(0)!.toString(16).padStart(4, "0")}`).to.deep.equal({ rule: "string.no_control_characters", field });
        }
      }
    });

    it(`lets names with other characters through that rule: accents, emoji, no-break space (${mode})`, async () => {
      for (const { field, call } of cases) {
        // Lowercase ASCII first, so usernames meet their own pattern.
        const refused = await refusedRule(call(mode, unique("zoe_\u00e9\u00a0\u{1f600}")));
        expect(refused?.rule, field).to.not.equal("string.no_control_characters");
      }
    });
  }

  it("carries the refusal as INVALID_ARGUMENT with one ErrorDetail, and stores nothing", async () => {
    const users = client(server, UserService, "json", user.accessToken);
    await users.updateProfile({ nickname: "Clean" });
    const detail = await expectError(users.updateProfile({ nickname: "Evil\u0000Twin" }), Errors.invalidArgument);
    expect(detail.metadata).to.include({ field: "nickname", rule: "string.no_control_characters" });
    const { profile } = await users.getProfile({});
    expect(profile?.nickname).to.equal("Clean");
  });
});

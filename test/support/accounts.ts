// Sign-in flows through the real AuthService, for tests that need signed-in users.
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { DeviceInputSchema, IdentityType, type DeviceInput } from "../../shared/gen/api/v1/common_pb.js";
import { DeviceType } from "../../shared/gen/shared/v1/common_pb.js";
import { client, freshEmail, lastCode, type TestServer, type WireMode } from "./harness.js";

export interface SignedIn {
  userId: number;
  email: string;
  deviceId: string;
  accessToken: string;
  refreshToken: string;
}

export function device(deviceId: string = randomUUID(), overrides: Partial<DeviceInput> = {}): DeviceInput {
  return create(DeviceInputSchema, {
    deviceId,
    deviceType: DeviceType.CLI,
    deviceName: "test runner",
    deviceModel: "node",
    osVersion: process.version,
    appVersion: "1.0.0",
    ...overrides,
  });
}

/** Signs in with a verification code (creating the account when the email is new). */
export async function signInWithCode(
  server: Pick<TestServer, "url" | "codesFile">,
  mode: WireMode = "json",
  email: string = freshEmail(),
  deviceId: string = randomUUID(),
): Promise<SignedIn> {
  const auth = client(server, AuthService, mode);
  const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
  const signed = await auth.verifyCode({ verifyToken, code: lastCode(server, email), deviceInfo: device(deviceId) });
  return { userId: signed.userId, email, deviceId, accessToken: signed.accessToken, refreshToken: signed.refreshToken };
}

/** A second device session for an existing account, by code (the code rate limit applies). */
export async function signInAnotherDevice(server: TestServer, email: string, deviceId: string = randomUUID()): Promise<SignedIn> {
  server.clock.advance(61_000);
  return signInWithCode(server, "json", email, deviceId);
}

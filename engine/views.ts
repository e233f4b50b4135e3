// Store records as protocol messages.
import { create } from "@bufbuild/protobuf";
import { DeviceSchema, UserSchema, type Device, type User } from "../shared/gen/api/v1/common_pb.js";
import { UserInfoSchema, type UserInfo } from "../shared/gen/shared/v1/common_pb.js";
import { GroupInfoSchema, type GroupInfo } from "../shared/gen/shared/v1/group_pb.js";
import type { GroupRecord, SessionRecord, UserRecord } from "../ports/store/store.js";

export function userInfoView(user: UserRecord): UserInfo {
  return create(UserInfoSchema, {
    userId: user.userId,
    username: user.username,
    nickname: user.nickname,
    avatarUrl: user.avatarUrl,
    accountType: user.accountType,
    signature: user.signature,
  });
}

export function selfView(user: UserRecord): User {
  return create(UserSchema, {
    userId: user.userId,
    username: user.username,
    phone: user.phone ?? undefined,
    email: user.email ?? undefined,
    nickname: user.nickname,
    avatarUrl: user.avatarUrl,
    signature: user.signature,
    hasPassword: user.passwordHash !== null,
    createdAt: BigInt(user.createdAt),
    canChangeUsername: !user.usernameCustom,
  });
}

export function deviceView(session: SessionRecord, currentDeviceId: string | undefined): Device {
  return create(DeviceSchema, {
    deviceId: session.deviceId,
    deviceType: session.deviceType,
    deviceName: session.deviceName,
    deviceModel: session.deviceModel,
    osVersion: session.osVersion,
    appVersion: session.appVersion,
    loginIp: session.loginIp,
    loginAt: BigInt(session.loginAt),
    lastActiveAt: BigInt(session.lastActiveAt),
    isCurrent: session.deviceId === currentDeviceId,
  });
}

export function groupInfoView(group: GroupRecord): GroupInfo {
  return create(GroupInfoSchema, {
    groupId: group.groupId,
    name: group.name,
    avatarUrl: group.avatarUrl,
    description: group.description,
    createdAt: BigInt(group.createdAt),
    ownerId: group.ownerId,
    status: group.status,
  });
}

// Who has a live connection, as the engine's presence service answers it (engine/presence.ts).

export const PresenceActions = {
  /** Which of the given users have a live connection on some gateway (OnlineAmongParams → number[]). */
  onlineAmong: "presence.onlineAmong",
} as const;

export interface OnlineAmongParams {
  userIds: number[];
}

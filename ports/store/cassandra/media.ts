// Media metadata and chunked-upload sessions on Cassandra (DATA-MODEL.md §5.11). Files are claimed
// by id with IF NOT EXISTS and compensated when one of a batch is refused (P3). Every change of a
// session row after its creation is a lightweight transaction on that row, and deleting it is the
// commit point of a completion, so of two completions one stores files. Expired sessions are found
// through the sweep index, indexed at the wall-clock hour they fall due.
import type { MediaFileRecord, MediaStore, UploadSessionRecord } from "../store.js";
import type { CassandraContext } from "./context.js";
import { numberOf, readAll, settledLwt, type LwtOutcome, type Params, type Row } from "./cql.js";
import { hourOf, sweepEntry } from "./sweep-index.js";

const hourMs = 3_600_000;

/**
 * A session is indexed at the hour it expires, so a sweep reads only sessions that are due, but
 * at most this many hours after the hour it was created in: a sweep asked about a `now` ahead of
 * the wall clock (a test's clock, a node's skew) walks at most this far past the current hour and
 * still finds every session expired by then. A session living longer is found early and skipped
 * until it expires. Times are the port's, so an expiry before the wall clock (a test's 1970 clock)
 * is indexed at the creation hour.
 */
const indexHorizonHours = 48;

/** Session rows read at once by a sweep (the rest queue behind them). */
const readWidth = 64;

const fileColumns = "file_id, owner_id, purpose, file_name, content_type, size, checksum, width, height, duration_ms, thumbnail_file_id, created_at";
const sessionColumns = "session_id, owner_id, file_id, file_name, content_type, size, uploaded, parts, created_at, expires_at";

const toFile = (row: Row): MediaFileRecord => ({
  fileId: row.file_id as string,
  ownerId: row.owner_id as number,
  purpose: row.purpose as number,
  fileName: row.file_name as string,
  contentType: row.content_type as string,
  size: numberOf(row.size),
  checksum: row.checksum as string,
  width: row.width as number,
  height: row.height as number,
  durationMs: row.duration_ms as number,
  thumbnailFileId: row.thumbnail_file_id as string,
  createdAt: numberOf(row.created_at),
});

const toSession = (row: Row): UploadSessionRecord => ({
  sessionId: row.session_id as string,
  ownerId: row.owner_id as number,
  fileId: row.file_id as string,
  fileName: row.file_name as string,
  contentType: row.content_type as string,
  size: numberOf(row.size),
  uploaded: numberOf(row.uploaded),
  // An empty list reads as null.
  parts: (row.parts as string[] | null) ?? [],
  createdAt: numberOf(row.created_at),
  expiresAt: numberOf(row.expires_at),
});

const fileParams = (file: MediaFileRecord): Params => [
  file.fileId,
  file.ownerId,
  file.purpose,
  file.fileName,
  file.contentType,
  BigInt(file.size),
  file.checksum,
  file.width,
  file.height,
  file.durationMs,
  file.thumbnailFileId,
  BigInt(file.createdAt),
];

const sessionParams = (session: UploadSessionRecord): Params => [
  session.sessionId,
  session.ownerId,
  session.fileId,
  session.fileName,
  session.contentType,
  BigInt(session.size),
  BigInt(session.uploaded),
  session.parts,
  BigInt(session.createdAt),
  BigInt(session.expiresAt),
];

const ownerIndexKey = (session: UploadSessionRecord): Params => [
  session.ownerId,
  session.fileName,
  session.contentType,
  BigInt(session.size),
  BigInt(session.createdAt),
  session.sessionId,
];

/** The hour (as wall-clock ms) a session is indexed at; see indexHorizonHours. */
function indexHourMs(session: UploadSessionRecord, wallClockMs: number): number {
  const created = hourOf(wallClockMs);
  return Math.max(created, Math.min(hourOf(session.expiresAt), created + indexHorizonHours)) * hourMs;
}

export function mediaStore(ctx: CassandraContext): MediaStore {
  const { cql } = ctx;

  const readSession = async (sessionId: string, serial = false) => {
    const row = await cql.row(`SELECT ${sessionColumns} FROM upload_sessions WHERE session_id = ?`, [sessionId], { serial });
    return row && toSession(row);
  };
  const readSecret = async (name: string) => (await cql.row("SELECT value FROM server_secrets WHERE name = ?", [name], { serial: true }))?.value as string | undefined;
  const dropOwnerIndex = (session: UploadSessionRecord) =>
    cql.write(
      "DELETE FROM upload_sessions_by_owner WHERE owner_id = ? AND file_name = ? AND content_type = ? AND size = ? AND created_at = ? AND session_id = ?",
      ownerIndexKey(session),
    );

  /** Inserts the session row unless one exists; answers whether this call's row is there. */
  const insertSession = async (session: UploadSessionRecord) => {
    const outcome = await settledLwt(cql, `INSERT INTO upload_sessions (${sessionColumns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS`, sessionParams(session), async () => {
      const found = await readSession(session.sessionId, true);
      return found ? found.fileId === session.fileId && found.createdAt === session.createdAt : undefined;
    });
    return outcome.applied;
  };

  /**
   * Deletes the session row if it exists (the commit point of deletion and completion: of two
   * callers one applies). `judged`: it was gone after a timeout, so maybe not by this call.
   */
  const removeSession = (sessionId: string) =>
    settledLwt(cql, "DELETE FROM upload_sessions WHERE session_id = ? IF EXISTS", [sessionId], async () => ((await readSession(sessionId, true)) ? undefined : true));

  async function insertFiles(files: readonly MediaFileRecord[]): Promise<void> {
    const outcomes = await Promise.allSettled(
      files.map((file) =>
        settledLwt(cql, `INSERT INTO media_files (${fileColumns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS`, fileParams(file), async () => {
          const row = await cql.row("SELECT owner_id, created_at FROM media_files WHERE file_id = ?", [file.fileId], { serial: true });
          return row ? row.owner_id === file.ownerId && numberOf(row.created_at) === file.createdAt : undefined;
        }),
      ),
    );
    const refusedAt = outcomes.findIndex((outcome) => outcome.status === "fulfilled" && !outcome.value.applied);
    const failure = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === "rejected");
    if (refusedAt < 0 && !failure) return;
    // Compensation: every row this call wrote or may have written goes, in reverse order; the
    // condition leaves a row another writer holds under the same id alone.
    const ours = files.filter((_file, i) => outcomes[i].status === "rejected" || (outcomes[i] as PromiseFulfilledResult<LwtOutcome>).value.applied).reverse();
    await Promise.allSettled(
      ours.map((file) => cql.lwt("DELETE FROM media_files WHERE file_id = ? IF owner_id = ? AND created_at = ?", [file.fileId, file.ownerId, BigInt(file.createdAt)])),
    );
    if (failure) throw failure.reason;
    throw new Error(`media file ${files[refusedAt].fileId} exists already`);
  }

  return {
    insertFiles,

    async getFile(fileId) {
      const row = await cql.row(`SELECT ${fileColumns} FROM media_files WHERE file_id = ?`, [fileId]);
      return row && toFile(row);
    },

    async createSession(session) {
      // The index row first: a session is never stored where no sweep would find it.
      const index = sweepEntry("uploads", session.sessionId, indexHourMs(session, Date.now()));
      await cql.write(index.query, index.params);
      if (!(await insertSession(session))) throw new Error(`upload session ${session.sessionId} exists already`);
      await cql.write(
        "INSERT INTO upload_sessions_by_owner (owner_id, file_name, content_type, size, created_at, session_id) VALUES (?, ?, ?, ?, ?, ?)",
        ownerIndexKey(session),
      );
    },

    getSession: (sessionId) => readSession(sessionId),

    async findResumableSession(ownerId, fileName, contentType, size, now) {
      const candidates = await cql.rows(
        "SELECT session_id FROM upload_sessions_by_owner WHERE owner_id = ? AND file_name = ? AND content_type = ? AND size = ?",
        [ownerId, fileName, contentType, BigInt(size)],
      );
      // Newest first by the clustering order; an index row whose session is gone is skipped.
      const sessions = await readAll(candidates, readWidth, (row) => readSession(row.session_id as string));
      return sessions.find((session) => session !== undefined && session.ownerId === ownerId && session.expiresAt > now);
    },

    async advanceSession(sessionId, expected, next, part) {
      const query = "UPDATE upload_sessions SET uploaded = ?, parts = parts + ? WHERE session_id = ? IF uploaded = ?";
      const outcome = await settledLwt(cql, query, [BigInt(next), [part], sessionId, BigInt(expected)], async () => {
        const session = await readSession(sessionId, true);
        // The part names one attempt, so finding it recorded tells this write from another writer's.
        if (session?.parts.includes(part)) return true;
        return session?.uploaded === expected ? undefined : false;
      });
      return outcome.applied;
    },

    async deleteSession(sessionId) {
      const session = await readSession(sessionId);
      if (!session) return false;
      const removed = await removeSession(sessionId);
      if (removed.applied) await dropOwnerIndex(session);
      return removed.applied;
    },

    async completeSession(sessionId, files) {
      const session = await readSession(sessionId);
      if (!session) return false;
      const removed = await removeSession(sessionId);
      if (!removed.applied) return false;
      try {
        await insertFiles(files);
      } catch (err) {
        // Storing nothing must leave the session as it was (the port's one unit); not when another
        // caller may have been the one that deleted it.
        if (!removed.judged) await insertSession(session).catch(() => undefined);
        throw err;
      }
      await dropOwnerIndex(session);
      return true;
    },

    async listExpiredSessions(now, limit) {
      const found = await ctx.sweeps.items("uploads", Math.min(hourOf(now), hourOf(Date.now()) + indexHorizonHours));
      const ids = [...new Set(found.map((entry) => entry.item))];
      const sessions = await readAll(ids, readWidth, (sessionId) => readSession(sessionId));
      const live = new Set(sessions.flatMap((session) => (session ? [session.sessionId] : [])));
      await ctx.sweeps.drop(
        "uploads",
        found,
        found.filter((entry) => !live.has(entry.item)),
      );
      return sessions
        .filter((session): session is UploadSessionRecord => session !== undefined && session.expiresAt <= now)
        .sort((a, b) => a.expiresAt - b.expiresAt || a.createdAt - b.createdAt || (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0))
        .slice(0, limit);
    },

    async ensureSecret(name, candidate, now) {
      const outcome = await settledLwt(cql, "INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) IF NOT EXISTS", [name, candidate, BigInt(now)], async () => {
        const value = await readSecret(name);
        return value === undefined ? undefined : value === candidate;
      });
      if (outcome.applied) return candidate;
      const value = (outcome.row?.value as string | undefined) ?? (await readSecret(name));
      if (value === undefined) throw new Error(`server secret ${name} was refused but cannot be read`);
      return value;
    },
  };
}

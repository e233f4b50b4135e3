import type Database from "better-sqlite3";
import type { MediaFileRecord, MediaStore, UploadSessionRecord } from "../store.js";

interface FileRow {
  file_id: string;
  owner_id: number;
  purpose: number;
  file_name: string;
  content_type: string;
  size: number;
  checksum: string;
  width: number;
  height: number;
  duration_ms: number;
  thumbnail_file_id: string;
  created_at: number;
}

interface SessionRow {
  session_id: string;
  owner_id: number;
  file_id: string;
  file_name: string;
  content_type: string;
  size: number;
  uploaded: number;
  /** JSON array of part names. */
  parts: string;
  created_at: number;
  expires_at: number;
}

const toFile = (row: FileRow): MediaFileRecord => ({
  fileId: row.file_id,
  ownerId: row.owner_id,
  purpose: row.purpose,
  fileName: row.file_name,
  contentType: row.content_type,
  size: row.size,
  checksum: row.checksum,
  width: row.width,
  height: row.height,
  durationMs: row.duration_ms,
  thumbnailFileId: row.thumbnail_file_id,
  createdAt: row.created_at,
});

const toSession = (row: SessionRow): UploadSessionRecord => ({
  sessionId: row.session_id,
  ownerId: row.owner_id,
  fileId: row.file_id,
  fileName: row.file_name,
  contentType: row.content_type,
  size: row.size,
  uploaded: row.uploaded,
  parts: JSON.parse(row.parts) as string[],
  createdAt: row.created_at,
  expiresAt: row.expires_at,
});

export function mediaStore(db: Database.Database): MediaStore {
  const insertFile = db.prepare(`
    INSERT INTO media_files (file_id, owner_id, purpose, file_name, content_type, size, checksum, width, height, duration_ms, thumbnail_file_id, created_at)
    VALUES (@fileId, @ownerId, @purpose, @fileName, @contentType, @size, @checksum, @width, @height, @durationMs, @thumbnailFileId, @createdAt)`);
  const fileById = db.prepare<[string], FileRow>("SELECT * FROM media_files WHERE file_id = ?");
  const insertSession = db.prepare(`
    INSERT INTO upload_sessions (session_id, owner_id, file_id, file_name, content_type, size, uploaded, parts, created_at, expires_at)
    VALUES (@sessionId, @ownerId, @fileId, @fileName, @contentType, @size, @uploaded, @parts, @createdAt, @expiresAt)`);
  const sessionById = db.prepare<[string], SessionRow>("SELECT * FROM upload_sessions WHERE session_id = ?");
  const resumable = db.prepare<[number, string, string, number, number], SessionRow>(
    `SELECT * FROM upload_sessions WHERE owner_id = ? AND file_name = ? AND content_type = ? AND size = ? AND expires_at > ?
     ORDER BY created_at DESC, rowid DESC LIMIT 1`,
  );
  const advance = db.prepare("UPDATE upload_sessions SET uploaded = ?, parts = json_insert(parts, '$[#]', ?) WHERE session_id = ? AND uploaded = ?");
  const removeSession = db.prepare("DELETE FROM upload_sessions WHERE session_id = ?");
  const expired = db.prepare<[number, number], SessionRow>("SELECT * FROM upload_sessions WHERE expires_at <= ? ORDER BY expires_at, rowid LIMIT ?");
  const insertSecret = db.prepare("INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING");
  const secretByName = db.prepare<[string], { value: string }>("SELECT value FROM server_secrets WHERE name = ?");

  const insertAll = db.transaction((files: readonly MediaFileRecord[]) => {
    for (const file of files) insertFile.run(file);
  });
  const complete = db.transaction((sessionId: string, files: readonly MediaFileRecord[]) => {
    if (removeSession.run(sessionId).changes !== 1) return false;
    for (const file of files) insertFile.run(file);
    return true;
  });
  const secret = db.transaction((name: string, candidate: string, now: number) => {
    insertSecret.run(name, candidate, now);
    return secretByName.get(name)!.value;
  });

  return {
    async insertFiles(files) {
      insertAll(files);
    },
    async getFile(fileId) {
      const row = fileById.get(fileId);
      return row && toFile(row);
    },
    async createSession(session) {
      insertSession.run({ ...session, parts: JSON.stringify(session.parts) });
    },
    async getSession(sessionId) {
      const row = sessionById.get(sessionId);
      return row && toSession(row);
    },
    async findResumableSession(ownerId, fileName, contentType, size, now) {
      const row = resumable.get(ownerId, fileName, contentType, size, now);
      return row && toSession(row);
    },
    async advanceSession(sessionId, expected, next, part) {
      return advance.run(next, part, sessionId, expected).changes === 1;
    },
    async deleteSession(sessionId) {
      return removeSession.run(sessionId).changes === 1;
    },
    async completeSession(sessionId, files) {
      return complete(sessionId, files);
    },
    async listExpiredSessions(now, limit) {
      return expired.all(now, limit).map(toSession);
    },
    async ensureSecret(name, candidate, now) {
      return secret(name, candidate, now);
    },
  };
}

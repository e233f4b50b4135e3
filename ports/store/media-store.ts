// Uploaded files and the upload sessions that assemble them: one aggregate of the storage port (store.ts).

export interface MediaFileRecord {
  /** Random, non-enumerable; also the blob key of its bytes. */
  fileId: string;
  ownerId: number;
  /** The api.v1.MediaPurpose number. */
  purpose: number;
  fileName: string;
  contentType: string;
  size: number;
  /** SHA-256, lowercase hex. */
  checksum: string;
  width: number;
  height: number;
  durationMs: number;
  /** Empty when the file has no thumbnail. */
  thumbnailFileId: string;
  createdAt: number;
}

export interface UploadSessionRecord {
  sessionId: string;
  ownerId: number;
  /** The id the finished file will get, fixed up front so completing twice cannot make two files. */
  fileId: string;
  fileName: string;
  contentType: string;
  /** Declared total bytes. */
  size: number;
  /** Bytes received so far. */
  uploaded: number;
  /**
   * The blob-store names of the staged parts that make up the bytes received, in order: each the
   * one attempt at its offset that moved `uploaded` (another attempt's part is not the upload's).
   */
  parts: string[];
  createdAt: number;
  expiresAt: number;
}

export interface MediaStore {
  /** Stores the metadata of new files (a file and its thumbnail) together. */
  insertFiles(files: readonly MediaFileRecord[]): Promise<void>;
  /** The file's metadata, or undefined. */
  getFile(fileId: string): Promise<MediaFileRecord | undefined>;
  /** Creates an upload session. */
  createSession(session: UploadSessionRecord): Promise<void>;
  /** The session, expired or not (the caller compares expiresAt with its clock), or undefined. */
  getSession(sessionId: string): Promise<UploadSessionRecord | undefined>;
  /** The owner's newest session with exactly these declared attributes that is open at `now`, or undefined. */
  findResumableSession(ownerId: number, fileName: string, contentType: string, size: number, now: number): Promise<UploadSessionRecord | undefined>;
  /**
   * Moves `uploaded` from `expected` to `next` and appends `part` (the staged bytes in between) to
   * `parts`, as one change; answers false (changing nothing) when `uploaded` was not `expected`.
   */
  advanceSession(sessionId: string, expected: number, next: number, part: string): Promise<boolean>;
  /** Deletes the session; answers whether it existed. */
  deleteSession(sessionId: string): Promise<boolean>;
  /** Stores the finished files and deletes the session in one unit; answers false (storing nothing) when the session is gone. */
  completeSession(sessionId: string, files: readonly MediaFileRecord[]): Promise<boolean>;
  /** Sessions whose expiresAt <= now, oldest first, at most `limit`. */
  listExpiredSessions(now: number, limit: number): Promise<UploadSessionRecord[]>;
  /** The server secret under `name`; the first caller's `candidate` becomes it, later candidates are ignored. */
  ensureSecret(name: string, candidate: string, now: number): Promise<string>;
}

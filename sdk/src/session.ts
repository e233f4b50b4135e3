// The credentials a client sends, and their renewal.
//
// A user's access token expires (its lifetime comes with it, as expiresIn); the refresh token
// renews it, and every refresh rotates the refresh token too: the previous one stops working at
// once. So two refreshes must never race with the same refresh token (the loser would be refused
// and the session lost), and the rotated token must reach durable storage (onTokens) before the
// process can rely on it. One refresh runs at a time; whoever needs a token meanwhile waits for
// its outcome. An agent token never expires and has no refresh token: it is sent as it is.
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionEndedError } from "./errors.js";

export interface SessionTokens {
  accessToken: string;
  /** Absent for agent tokens, which do not expire and are not refreshed. */
  refreshToken?: string;
  /** When the access token expires, in milliseconds since the epoch (issue time + expiresIn). */
  accessExpiresAt?: number;
}

/** What RefreshToken answers. */
export interface RefreshedTokens {
  accessToken: string;
  refreshToken: string;
  /** Access token lifetime in seconds. */
  expiresIn: number;
}

export interface TokenSessionOptions {
  tokens?: SessionTokens;
  /** Calls RefreshToken with the current refresh token. */
  refresh: (refreshToken: string) => Promise<RefreshedTokens>;
  /**
   * Persists new tokens (after sign-in and every refresh; undefined once the session ended).
   * Awaited before any call continues with them; if it throws, the calls waiting fail with its error.
   */
  onTokens?: (tokens: SessionTokens | undefined) => void | Promise<void>;
  /** The refresh token was refused: the user must sign in again. */
  onSessionEnded?: (cause: unknown) => void;
  /** Refresh this long before the access token expires, so a call never leaves with a dying token. */
  refreshLeewayMs?: number;
  now?: () => number;
}

export class TokenSession {
  private tokens: SessionTokens | undefined;
  private refreshing: Promise<string> | undefined;
  private ended = false;
  /** Why the session ended: every later SessionEndedError carries it. */
  private endCause: unknown;
  private readonly now: () => number;
  private readonly leewayMs: number;

  constructor(private readonly options: TokenSessionOptions) {
    this.tokens = options.tokens;
    this.now = options.now ?? Date.now;
    this.leewayMs = options.refreshLeewayMs ?? 60_000;
  }

  /** The tokens held now (undefined before sign-in and after the session ended). */
  get current(): SessionTokens | undefined {
    return this.tokens;
  }

  /** Whether a refused access token can be renewed here. */
  get canRefresh(): boolean {
    return this.tokens?.refreshToken !== undefined;
  }

  /** Adopts the tokens of a sign-in (or new tokens from elsewhere) and persists them. */
  async setTokens(tokens: SessionTokens): Promise<void> {
    this.tokens = tokens;
    this.ended = false;
    this.endCause = undefined;
    await this.options.onTokens?.(tokens);
  }

  /** Adopts what VerifyCode, LoginPassword or RefreshToken answered. */
  adoptIssued(issued: RefreshedTokens): Promise<void> {
    return this.setTokens({ accessToken: issued.accessToken, refreshToken: issued.refreshToken, accessExpiresAt: this.expiryOf(issued.expiresIn) });
  }

  /** Forgets the tokens (after Logout). */
  async clear(): Promise<void> {
    if (!this.tokens) return;
    this.tokens = undefined;
    await this.options.onTokens?.(undefined);
  }

  /**
   * The access token to send: waits for a refresh in flight, and refreshes first when the token
   * is about to expire. Undefined when there is none (not signed in); throws SessionEndedError
   * once the refresh token was refused.
   */
  async accessToken(): Promise<string | undefined> {
    if (this.refreshing) return this.refreshing;
    if (this.ended) throw new SessionEndedError({ cause: this.endCause });
    const tokens = this.tokens;
    if (!tokens) return undefined;
    if (tokens.refreshToken !== undefined && tokens.accessExpiresAt !== undefined && tokens.accessExpiresAt - this.leewayMs <= this.now()) {
      return this.refresh(tokens.accessToken);
    }
    return tokens.accessToken;
  }

  /**
   * Replaces an access token the server refused. Callers that saw the same token refused share
   * one refresh; a caller whose token was already replaced gets the new one without another.
   */
  refresh(refused: string): Promise<string> {
    if (this.refreshing) return this.refreshing;
    if (this.ended) return Promise.reject(new SessionEndedError({ cause: this.endCause }));
    const tokens = this.tokens;
    if (!tokens) return Promise.reject(new SessionEndedError());
    if (tokens.accessToken !== refused) return Promise.resolve(tokens.accessToken);
    const refreshToken = tokens.refreshToken;
    if (refreshToken === undefined) return Promise.reject(new Error("this token cannot be refreshed (agent tokens have no refresh token)"));
    const running = this.runRefresh(refreshToken).finally(() => {
      this.refreshing = undefined;
    });
    this.refreshing = running;
    return running;
  }

  private async runRefresh(refreshToken: string): Promise<string> {
    let issued: RefreshedTokens;
    try {
      issued = await this.options.refresh(refreshToken);
    } catch (err) {
      // Only a refusal ends the session; a network failure keeps the tokens for the next try.
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) {
        this.tokens = undefined;
        this.ended = true;
        this.endCause = err;
        this.options.onSessionEnded?.(err);
        await this.options.onTokens?.(undefined);
        throw new SessionEndedError({ cause: err });
      }
      throw err;
    }
    await this.adoptIssued(issued);
    return issued.accessToken;
  }

  private expiryOf(expiresInSeconds: number): number | undefined {
    return expiresInSeconds > 0 ? this.now() + expiresInSeconds * 1000 : undefined;
  }
}

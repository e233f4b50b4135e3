// Sign-in storm: new people signing in at a rising rate, each with an email code (RequestVerifyCode,
// the code from CODE_FILE, VerifyCode), then a first authenticated call and a token refresh.
// The server must run with its per-address limits raised (all requests come from one address).
// Rate ramps from 5/s to RATE per second (50) over DURATION (30s), then holds for HOLD (10s).
import { check } from "k6";
import type { Options } from "k6/options";
import { Trend } from "k6/metrics";
import { envNumber, rpc, guarded, signIn, summaryTrendStats } from "../lib/parley.ts";

const signInTime = new Trend("parley_sign_in_ms", true);

export const options: Options = {
  summaryTrendStats,
  scenarios: {
    signInStorm: {
      executor: "ramping-arrival-rate",
      startRate: 5,
      timeUnit: "1s",
      preAllocatedVUs: 20,
      maxVUs: envNumber("MAX_VUS", 200),
      stages: [
        { target: envNumber("RATE", 50), duration: __ENV.DURATION || "30s" },
        { target: envNumber("RATE", 50), duration: __ENV.HOLD || "10s" },
      ],
    },
  },
  thresholds: {
    checks: ["rate>0.99"],
    http_req_failed: ["rate<0.01"],
    dropped_iterations: ["count<10"],
    parley_iteration_errors: ["count==0"],
    parley_sign_in_ms: ["p(95)<1000", "p(99)<2000"],
    "http_req_duration{name:AuthService/VerifyCode}": ["p(95)<500", "p(99)<1000"],
  },
};

function signInStormIteration(): void {
  const began = Date.now();
  const session = signIn("storm");
  signInTime.add(Date.now() - began);
  const profile = rpc<{ profile?: { userId?: number } }>("UserService/GetProfile", {}, session.accessToken);
  check(profile, { "the new account reads its profile": (p) => p.profile?.userId === session.userId });
  const refreshed = rpc<{ accessToken?: string }>("AuthService/RefreshToken", { refreshToken: session.refreshToken });
  check(refreshed, { "the refresh token is honoured": (r) => typeof r.accessToken === "string" && r.accessToken !== session.accessToken });
}

export default function signInStorm(): Promise<void> {
  return guarded(() => signInStormIteration());
}

// Writes the API's protocol as one compiled FileDescriptorSet (a "protoset"): every file of
// shared/proto/ and what they import, as protoc or buf compile them. It is what gRPC tools take
// when they cannot read the .proto files themselves: grpcurl -protoset, Postman, and
// @grpc/proto-loader's loadFileDescriptorSetFromBuffer (its own .proto parser, protobufjs, stops
// at the protovalidate rule syntax `{[api.v1.no_control_characters]: true}` that protoc accepts).
//
// buf compiles, offline: buf/validate/validate.proto is written from the descriptor
// @bufbuild/protovalidate embeds, as scripts/generate.ts does.
//
// Usage: npx tsx scripts/protoset.ts [out]   (default parley.protoset)
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { file_buf_validate_validate } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { printProtoSkeleton } from "./generate.js";

const root = resolve(import.meta.dirname, "..");

/** The compiled FileDescriptorSet of shared/proto/, imports included, in its binary form. */
export function buildProtoset(): Buffer {
  const workspace = mkdtempSync(join(tmpdir(), "parley-protoset-"));
  try {
    cpSync(join(root, "shared/proto"), join(workspace, "proto"), { recursive: true });
    const validateProto = join(workspace, "deps/buf/validate/validate.proto");
    mkdirSync(dirname(validateProto), { recursive: true });
    writeFileSync(validateProto, printProtoSkeleton(file_buf_validate_validate.proto));
    writeFileSync(join(workspace, "buf.yaml"), "version: v2\nmodules:\n  - path: proto\n  - path: deps\n");
    const out = join(workspace, "parley.binpb");
    execFileSync(join(root, "node_modules/.bin/buf"), ["build", "--as-file-descriptor-set", "-o", out], { cwd: workspace, stdio: ["ignore", "inherit", "inherit"] });
    return readFileSync(out);
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const out = resolve(process.argv[2] ?? "parley.protoset");
  writeFileSync(out, buildProtoset());
  console.log(`wrote ${out}`);
}

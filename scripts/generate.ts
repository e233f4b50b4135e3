// Generates shared/gen/ from shared/proto/ with buf + protoc-gen-es, offline. It is the one
// generated copy of the protocol: the SDK imports it, and its build compiles it into sdk/dist.
//
// Our protos import buf/validate/validate.proto, which normally comes from the Buf registry. The
// registry is not reachable from every machine, but @bufbuild/protovalidate embeds the descriptor
// of that file. We print an equivalent .proto skeleton from that descriptor (types, fields,
// extensions; no options) into a scratch workspace, so buf can resolve the option extensions.
// Nothing is generated for it: map_imports points the generated code at the npm package.
//
// Usage: npm run generate            (writes shared/gen/)
//        tsx scripts/generate.ts --out <dir>   (writes elsewhere; the freshness test uses it)
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { file_buf_validate_validate } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { isFieldSet } from "@bufbuild/protobuf";
import {
  FieldDescriptorProtoSchema,
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as FieldType,
  type DescriptorProto,
  type EnumDescriptorProto,
  type FieldDescriptorProto,
  type FileDescriptorProto,
} from "@bufbuild/protobuf/wkt";

const root = resolve(import.meta.dirname, "..");

const scalarNames: Partial<Record<FieldType, string>> = {
  [FieldType.DOUBLE]: "double",
  [FieldType.FLOAT]: "float",
  [FieldType.INT64]: "int64",
  [FieldType.UINT64]: "uint64",
  [FieldType.INT32]: "int32",
  [FieldType.FIXED64]: "fixed64",
  [FieldType.FIXED32]: "fixed32",
  [FieldType.BOOL]: "bool",
  [FieldType.STRING]: "string",
  [FieldType.BYTES]: "bytes",
  [FieldType.UINT32]: "uint32",
  [FieldType.SFIXED32]: "sfixed32",
  [FieldType.SFIXED64]: "sfixed64",
  [FieldType.SINT32]: "sint32",
  [FieldType.SINT64]: "sint64",
};

function fieldTypeName(field: FieldDescriptorProto): string {
  if (field.type === FieldType.MESSAGE || field.type === FieldType.ENUM) return field.typeName;
  const name = scalarNames[field.type];
  if (!name) throw new Error(`unsupported field type ${field.type} in ${field.name}`);
  return name;
}

function printField(field: FieldDescriptorProto, inOneof: boolean): string {
  const label = inOneof ? "" : field.label === Label.REPEATED ? "repeated " : field.label === Label.REQUIRED ? "required " : "optional ";
  return `${label}${fieldTypeName(field)} ${field.name} = ${field.number};`;
}

function printEnum(e: EnumDescriptorProto, indent: string): string[] {
  return [`${indent}enum ${e.name} {`, ...e.value.map((v) => `${indent}  ${v.name} = ${v.number};`), `${indent}}`];
}

function printMessage(m: DescriptorProto, indent: string): string[] {
  const lines = [`${indent}message ${m.name} {`];
  const inner = indent + "  ";
  for (const e of m.enumType) lines.push(...printEnum(e, inner));
  for (const nested of m.nestedType) lines.push(...printMessage(nested, inner));
  const oneofFields = new Map<number, FieldDescriptorProto[]>();
  for (const field of m.field) {
    // Boot descriptors leave oneofIndex at 0 when unset, so ask for presence explicitly.
    if (isFieldSet(field, FieldDescriptorProtoSchema.field.oneofIndex)) {
      oneofFields.set(field.oneofIndex, [...(oneofFields.get(field.oneofIndex) ?? []), field]);
    } else {
      lines.push(inner + printField(field, false));
    }
  }
  m.oneofDecl.forEach((decl, index) => {
    const fields = oneofFields.get(index);
    if (!fields) return;
    lines.push(`${inner}oneof ${decl.name} {`, ...fields.map((f) => `${inner}  ${printField(f, true)}`), `${inner}}`);
  });
  for (const range of m.extensionRange) {
    const end = range.end >= 536870912 ? "max" : String(range.end - 1);
    lines.push(`${inner}extensions ${range.start} to ${end};`);
  }
  for (const range of m.reservedRange) lines.push(`${inner}reserved ${range.start} to ${range.end - 1};`);
  lines.push(`${indent}}`);
  return lines;
}

/** Prints a proto2 file's types and extensions as .proto text, without any options. */
export function printProtoSkeleton(file: FileDescriptorProto): string {
  const lines = [`syntax = "proto2";`, `package ${file.package};`];
  for (const dep of file.dependency) lines.push(`import "${dep}";`);
  for (const e of file.enumType) lines.push(...printEnum(e, ""));
  for (const m of file.messageType) lines.push(...printMessage(m, ""));
  const byExtendee = new Map<string, FieldDescriptorProto[]>();
  for (const ext of file.extension) byExtendee.set(ext.extendee, [...(byExtendee.get(ext.extendee) ?? []), ext]);
  for (const [extendee, fields] of byExtendee) {
    lines.push(`extend ${extendee} {`, ...fields.map((f) => "  " + printField(f, false)), "}");
  }
  return lines.join("\n") + "\n";
}

/** Writes the generated code into `outDir`. */
export function generate(outDir: string): void {
  const workspace = mkdtempSync(join(tmpdir(), "parley-generate-"));
  try {
    cpSync(join(root, "shared/proto"), join(workspace, "proto"), { recursive: true });
    const validateProto = join(workspace, "deps/buf/validate/validate.proto");
    mkdirSync(dirname(validateProto), { recursive: true });
    writeFileSync(validateProto, printProtoSkeleton(file_buf_validate_validate.proto));
    writeFileSync(join(workspace, "buf.yaml"), "version: v2\nmodules:\n  - path: proto\n  - path: deps\n");
    writeFileSync(
      join(workspace, "buf.gen.yaml"),
      [
        "version: v2",
        "clean: true",
        "plugins:",
        `  - local: ${join(root, "node_modules/.bin/protoc-gen-es")}`,
        `    out: ${outDir}`,
        "    opt:",
        "      - target=ts",
        "      - import_extension=js",
        "      - map_imports=buf/validate/:@bufbuild/protovalidate/gen",
        "      - json_types=true",
        "",
      ].join("\n"),
    );
    execFileSync(join(root, "node_modules/.bin/buf"), ["generate", "proto"], {
      cwd: workspace,
      stdio: ["ignore", "inherit", "inherit"],
    });
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const index = process.argv.indexOf("--out");
  generate(index > 0 ? resolve(process.argv[index + 1]) : join(root, "shared/gen"));
}

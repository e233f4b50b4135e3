// Business errors as engine services throw them, and as the API tier reads them back. The catalogue
// itself is shared/error-catalogue.ts (re-exported here, so server code takes both from one module).
import moleculer from "moleculer";
import { catalogueEntryByName, type CatalogueEntry } from "./error-catalogue.js";

export * from "./error-catalogue.js";

/**
 * A business error as engine services throw it. Moleculer carries `type` and `data` of an error
 * between nodes, so the catalogue name rides in `type` and the metadata in `data`; the API tier
 * reads those two fields whether the error was thrown locally or regenerated from a packet.
 */
export class ParleyError extends moleculer.Errors.MoleculerError {
  constructor(entry: CatalogueEntry, metadata: Record<string, string> = {}, message?: string) {
    super(message ?? entry.message, 400, entry.errorName, { metadata });
    this.name = "ParleyError";
  }
}

/** Reads the catalogue entry and metadata of an error thrown by any engine service, local or remote. */
export function parleyErrorParts(err: unknown): { entry: CatalogueEntry; metadata: Record<string, string>; message: string } | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const { type, data, message } = err as { type?: unknown; data?: { metadata?: Record<string, string> }; message?: unknown };
  if (typeof type !== "string") return undefined;
  const entry = catalogueEntryByName(type);
  if (!entry) return undefined;
  return { entry, metadata: data?.metadata ?? {}, message: typeof message === "string" ? message : entry.message };
}

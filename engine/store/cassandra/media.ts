import type { MediaStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function mediaStore(_ctx: CassandraContext): MediaStore {
  return unbuilt<MediaStore>("mediaStore");
}

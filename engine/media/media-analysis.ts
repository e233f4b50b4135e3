// What the server learns from a stored file's bytes: image dimensions (png, jpeg, gif, webp) and
// a thumbnail through sharp (libvips), audio and video durations through music-metadata. Both
// read from a file path, so large files are read piecemeal, never loaded whole.
//
// Images are recognised by their leading bytes, not by the declared content type, and only the
// four formats above ever reach libvips: a file claiming image/png that is really SVG, PDF or
// TIFF is not decoded. Analysis never fails an upload: bytes it cannot read yield zeros.
import { open } from "node:fs/promises";
import sharp from "sharp";

type ImageFormat = "png" | "jpeg" | "gif" | "webp";

export interface MediaFacts {
  width: number;
  height: number;
  durationMs: number;
  /** Made for images when asked for; absent when the image could not be decoded. */
  thumbnail?: Thumbnail;
}

export interface Thumbnail {
  data: Buffer;
  contentType: string;
  width: number;
  height: number;
}

/** The longest side of a thumbnail, in pixels. */
const thumbnailMaxSide = 320;

// Decoding is bounded: a small file can declare a huge canvas (a decompression bomb).
const maxInputPixels = 100_000_000;

/** The image format of a file's first bytes, if it is one we decode. */
function sniffImageFormat(head: Uint8Array): ImageFormat | undefined {
  const starts = (...bytes: number[]) => bytes.every((b, i) => head[i] === b);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return "png";
  if (starts(0xff, 0xd8, 0xff)) return "jpeg";
  if (starts(0x47, 0x49, 0x46, 0x38)) return "gif";
  const ascii = (from: number, to: number) => String.fromCharCode(...head.subarray(from, to));
  if (head.length >= 12 && ascii(0, 4) === "RIFF" && ascii(8, 12) === "WEBP") return "webp";
  return undefined;
}

async function readHead(path: string, length: number): Promise<Uint8Array> {
  const handle = await open(path, "r");
  try {
    const buffer = new Uint8Array(length);
    const { bytesRead } = await handle.read(buffer, 0, length, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

async function imageFacts(path: string): Promise<{ width: number; height: number } | undefined> {
  try {
    const metadata = await sharp(path, { limitInputPixels: maxInputPixels }).metadata();
    // Pixels as a viewer shows them: EXIF orientation applied; sharp reads the first frame of an animation.
    const { width, height } = metadata.autoOrient;
    return width > 0 && height > 0 ? { width, height } : undefined;
  } catch {
    return undefined;
  }
}

// music-metadata is an ES module that default-imports CommonJS packages. Loaded through a
// require chain (mocha with the tsx hook compiles our files to CommonJS), the transpiler's interop
// leaves those default imports undefined; a real dynamic import keeps Node's own interop.
let musicMetadata: Promise<typeof import("music-metadata")> | undefined;

async function playbackFacts(path: string): Promise<{ durationMs: number; width: number; height: number }> {
  try {
    musicMetadata ??= import("music-metadata");
    const { parseFile } = await musicMetadata;
    const { format } = await parseFile(path, { duration: true, skipCovers: true });
    const duration = format.duration && Number.isFinite(format.duration) ? Math.round(format.duration * 1000) : 0;
    // Only some containers (Matroska, WebM) describe their video track's pixels to this parser.
    const video = format.trackInfo.find((track) => track.video?.pixelWidth && track.video.pixelHeight)?.video;
    return { durationMs: duration, width: video?.pixelWidth ?? 0, height: video?.pixelHeight ?? 0 };
  } catch {
    return { durationMs: 0, width: 0, height: 0 };
  }
}

/** Dimensions and duration of the file at `path`, declared as `contentType`, and a thumbnail of an image if `withThumbnail`. */
export async function analyzeMedia(path: string, contentType: string, withThumbnail: boolean): Promise<MediaFacts> {
  if (sniffImageFormat(await readHead(path, 16))) {
    const size = await imageFacts(path);
    if (!size) return { width: 0, height: 0, durationMs: 0 };
    const thumbnail = withThumbnail ? await makeThumbnail(path) : undefined;
    return { ...size, durationMs: 0, ...(thumbnail && { thumbnail }) };
  }
  const type = contentType.toLowerCase();
  if (type.startsWith("audio/")) return { ...(await playbackFacts(path)), width: 0, height: 0 };
  if (type.startsWith("video/")) return playbackFacts(path);
  return { width: 0, height: 0, durationMs: 0 };
}

/** A JPEG of the image's first frame, upright, at most thumbnailMaxSide on its longest side; undefined when it cannot be decoded. */
async function makeThumbnail(path: string): Promise<Thumbnail | undefined> {
  try {
    const { data, info } = await sharp(path, { limitInputPixels: maxInputPixels })
      .autoOrient()
      .resize(thumbnailMaxSide, thumbnailMaxSide, { fit: "inside", withoutEnlargement: true })
      // JPEG has no alpha: transparent areas become white rather than black.
      .flatten({ background: "#ffffff" })
      .jpeg({ quality: 80 })
      .toBuffer({ resolveWithObject: true });
    return { data, contentType: "image/jpeg", width: info.width, height: info.height };
  } catch {
    return undefined;
  }
}

// A first look at the dataset before it is uploaded: the record count the quote needs, the
// lines that are not JSON objects at all, and which record shapes it holds (chat, instruction,
// labelled…) so the requester sees what the file is. The server checks each record's fields
// against the task; this only saves uploading a file that is plainly not JSONL. Streams, so a
// large file is never held as one string.

export interface DatasetScan {
  records: number;
  bytes: number;
  /** At most MAX_LINE_ERRORS, as the server words them: `line N: …`. */
  errors: string[];
  /** Records of each shape, by the keys that decide it (core/src/protocol/records.rs). */
  shapes: Partial<Record<RecordShape, number>>;
}

export const MAX_LINE_ERRORS = 5;

/** The record shapes a dataset may hold; the server checks each record's fields in full. */
export type RecordShape = 'preference' | 'chat' | 'instruction' | 'prompt_completion' | 'labelled' | 'text' | 'unknown';

export const SHAPE_LABEL: Record<RecordShape, string> = {
  preference: 'preference ({"prompt","chosen","rejected"})',
  chat: 'chat ({"messages"})',
  instruction: 'instruction ({"instruction","input","output"})',
  prompt_completion: 'prompt/completion',
  labelled: 'labelled ({"text","label"})',
  text: 'plain text',
  unknown: 'unrecognised',
};

/** A record's shape, from the key that decides it, as the server's parser tells them apart. */
export function recordShape(record: object): RecordShape {
  if ('chosen' in record || 'rejected' in record) return 'preference';
  if ('messages' in record) return 'chat';
  if ('instruction' in record || 'output' in record) return 'instruction';
  if ('prompt' in record || 'completion' in record) return 'prompt_completion';
  if ('label' in record) return 'labelled';
  if ('text' in record) return 'text';
  return 'unknown';
}

/** "900 chat ({"messages"}) records", or the mix: "12 instruction (…), 3 plain text". */
export function describeShapes(scan: DatasetScan): string {
  const parts = (Object.entries(scan.shapes) as [RecordShape, number][])
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1]);
  if (parts.length === 0) return '';
  if (parts.length === 1) return `${SHAPE_LABEL[parts[0]![0]]} records`;
  return parts.map(([shape, n]) => `${n} ${SHAPE_LABEL[shape]}`).join(', ');
}

function checkLine(line: string, n: number, scan: DatasetScan): void {
  if (line.trim() === '') return;
  scan.records += 1;
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    if (scan.errors.length < MAX_LINE_ERRORS) scan.errors.push(`line ${n}: not JSON`);
    return;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    if (scan.errors.length < MAX_LINE_ERRORS) scan.errors.push(`line ${n}: a record must be a JSON object`);
    return;
  }
  const shape = recordShape(value);
  scan.shapes[shape] = (scan.shapes[shape] ?? 0) + 1;
}

export async function scanDataset(file: Blob): Promise<DatasetScan> {
  const scan: DatasetScan = { records: 0, bytes: file.size, errors: [], shapes: {} };
  const reader = file.stream().pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  let n = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const lines = (rest + value).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) checkLine(line.replace(/\r$/, ''), ++n, scan);
  }
  checkLine(rest.replace(/\r$/, ''), ++n, scan);
  return scan;
}

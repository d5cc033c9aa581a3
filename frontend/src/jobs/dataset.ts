// A first look at the dataset before it is uploaded: the record count the quote needs, and the
// lines that are not JSON objects at all (the server checks each record's fields against the
// task; this only saves uploading a file that is plainly not JSONL). Streams, so a large file is
// never held as one string.

export interface DatasetScan {
  records: number;
  bytes: number;
  /** At most MAX_LINE_ERRORS, as the server words them: `line N: …`. */
  errors: string[];
}

export const MAX_LINE_ERRORS = 5;

function checkLine(line: string, n: number, scan: DatasetScan): void {
  if (line.trim() === '') return;
  scan.records += 1;
  if (scan.errors.length >= MAX_LINE_ERRORS) return;
  try {
    const value: unknown = JSON.parse(line);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      scan.errors.push(`line ${n}: a record must be a JSON object`);
    }
  } catch {
    scan.errors.push(`line ${n}: not JSON`);
  }
}

export async function scanDataset(file: Blob): Promise<DatasetScan> {
  const scan: DatasetScan = { records: 0, bytes: file.size, errors: [] };
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

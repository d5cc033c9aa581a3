// `POST /v1/jobs` as multipart (`spec` JSON + `dataset` JSONL) through XMLHttpRequest, the one
// browser API that reports upload progress. The reply is the same JobView the typed client
// knows; failures are the same ApiProblem.
import { ApiProblem, parseBody, toProblem } from './problem';
import type { JobView } from './types';
import type { JobSpec } from '../jobs/spec';

export interface UploadProgress {
  loaded: number;
  total: number;
}

export interface PostJobRequest {
  spec: JobSpec;
  dataset: Blob;
  datasetName: string;
  token: string;
  onProgress?: (p: UploadProgress) => void;
  signal?: AbortSignal;
  url?: string;
}

export function jobForm(spec: JobSpec, dataset: Blob, datasetName: string): FormData {
  const form = new FormData();
  form.append('spec', new Blob([JSON.stringify(spec)], { type: 'application/json' }), 'spec.json');
  form.append('dataset', dataset, datasetName);
  return form;
}

export function postJob(req: PostJobRequest): Promise<JobView> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', req.url ?? '/v1/jobs');
    xhr.setRequestHeader('authorization', `Bearer ${req.token}`);
    xhr.setRequestHeader('accept', 'application/json, application/problem+json');
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) req.onProgress?.({ loaded: e.loaded, total: e.total });
    };
    xhr.onload = () => {
      const body = parseBody(xhr.responseText);
      if (xhr.status === 201 || xhr.status === 200) resolve(body as JobView);
      else reject(new ApiProblem(toProblem(xhr.status, body, xhr.statusText)));
    };
    xhr.onerror = () => reject(new ApiProblem(toProblem(0, '')));
    xhr.onabort = () => reject(new DOMException('The upload was cancelled', 'AbortError'));
    req.signal?.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(jobForm(req.spec, req.dataset, req.datasetName));
  });
}

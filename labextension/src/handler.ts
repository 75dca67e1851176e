/**
 * The one way the front end talks to the server: `requestAPI` against the
 * `/easeml/` routes of our jupyter_server extension (ease_jupyter/lab).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** An error answer: of the ease.ml service (relayed by the server extension) or of Jupyter itself. */
export class EaseMLRequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string
  ) {
    super(message);
    this.name = 'EaseMLRequestError';
  }
}

/** One of the caller's tasks, as `GET /easeml/tasks` lists it. */
export interface ITaskRow {
  name: string;
  program: string | null;
  state: string;
  accuracy: number | null;
  model: string | null;
  config: Record<string, unknown> | null;
  dataset_version: number | null;
  n_examples: number | null;
  jobs: Record<string, number>;
}

/** One notebook session of the caller, as `GET /easeml/notebooks` lists it (the service's `GET /api/v1/notebooks`). */
export interface INotebookSession {
  id: string;
  user: string;
  kernel_id: string | null;
  hub_user: string | null;
  server_name: string | null;
  notebook_path: string | null;
  tasks: string[];
  alive: boolean;
  connected?: boolean;
  seconds_since_seen?: number;
}

/** A notification of the service (service/notify.py), relayed by `GET /easeml/notifications`. */
export interface INotification {
  id: number;
  task: string;
  kind: 'improved' | 'idle' | 'failed' | 'budget' | string;
  message: string;
}

/** `GET /easeml/notifications?after=N`. */
export interface INotificationBatch {
  notifications: INotification[];
  last: number;
  connected: boolean;
}

/** `GET /easeml/whoami`. */
export interface IWhoami {
  url: string;
  user: { name: string; admin?: boolean };
}

/**
 * Call `/easeml/<endPoint>` and parse the JSON answer.
 *
 * @throws EaseMLRequestError for an error status (its message is the one to show),
 *   ServerConnection.NetworkError when the Jupyter server is unreachable.
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'easeml', endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!response.ok) {
    throw errorOf(response, data);
  }
  return data as T;
}

function errorOf(response: Response, data: any): EaseMLRequestError {
  const error = data && typeof data === 'object' ? data.error : null;
  if (error && typeof error === 'object') {
    // Our extension's shape: {"error": {"code", "message"}}.
    return new EaseMLRequestError(response.status, String(error.code ?? 'error'), String(error.message ?? ''));
  }
  // jupyter_server's own errors ({"message", "reason"}), e.g. 403 when not logged in.
  const message =
    data && typeof data === 'object' && data.message ? String(data.message) : typeof data === 'string' && data ? data : response.statusText;
  return new EaseMLRequestError(response.status, 'http_error', `${response.status} ${message}`);
}

/**
 * Toasts for the service's notifications (ease_jupyter/service/notify.py):
 * a task's best model improved, it went idle, a job failed, a budget ran out.
 *
 * The server extension reads them from the service's event stream and keeps
 * them numbered (`GET /easeml/notifications?after=N`); this polls it and
 * shows each new one once through JupyterLab's notification centre. A page
 * opened now starts from now (its first poll sets `after`), not with old toasts.
 *
 * DOM contract (browser tests): each toast's text starts with "ease.ml: ".
 */
import { Notification } from '@jupyterlab/apputils';

import { INotification, INotificationBatch } from './handler';

export const TOAST_PREFIX = 'ease.ml: ';

/** The toast of one notification: success for improved and idle, error for failed, warning for budget. */
export function showToast(note: INotification): void {
  const text = `${TOAST_PREFIX}${note.message}`;
  switch (note.kind) {
    case 'failed':
      Notification.error(text, { autoClose: 10000 });
      break;
    case 'budget':
      Notification.warning(text, { autoClose: 10000 });
      break;
    case 'improved':
      Notification.info(text, { autoClose: 5000 });
      break;
    default:
      Notification.success(text, { autoClose: 8000 });
  }
}

export class NotificationPoller {
  constructor(
    private readonly fetchBatch: (after: number | null) => Promise<INotificationBatch>,
    private readonly intervalMs = 2000
  ) {}

  start(): void {
    if (!this.timer) {
      void this.poll();
      this.timer = window.setInterval(() => void this.poll(), this.intervalMs);
    }
  }

  stop(): void {
    window.clearInterval(this.timer);
    this.timer = 0;
  }

  /** One poll; polls never overlap, so no notification shows twice. */
  async poll(): Promise<void> {
    if (this.busy) {
      return;
    }
    this.busy = true;
    try {
      const batch = await this.fetchBatch(this.after);
      for (const note of batch.notifications) {
        if (this.after === null || note.id > this.after) {
          showToast(note);
        }
      }
      this.after = batch.last;
    } catch {
      // No server or no service now: the sidebar shows why; the next poll tries again.
    } finally {
      this.busy = false;
    }
  }

  private after: number | null = null;
  private busy = false;
  private timer = 0;
}

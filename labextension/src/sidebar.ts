/**
 * The left sidebar: the user's ease.ml tasks with state and best accuracy.
 *
 * DOM contract (used by the browser tests): the panel has id `easeml-sidebar`;
 * each task is an `li.easeml-task` with `data-task` (its name) and
 * `data-state`; errors appear in `.easeml-error` (role "alert"); the refresh
 * button is `button.easeml-refresh`; the last update is in `.easeml-status`.
 * The user's notebook sessions follow in `ul.easeml-notebooks`: each an
 * `li.easeml-notebook` with `data-session` and `data-alive` ("true"/"false"),
 * showing its path, its server and "alive" or "gone".
 */
import { LabIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { EaseMLRequestError, INotebookSession, ITaskRow } from './handler';

export const SIDEBAR_ID = 'easeml-sidebar';

export const easemlIcon = new LabIcon({
  name: 'ease-jupyter:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<rect x="3" y="13" width="4" height="8" rx="1"/><rect x="10" y="8" width="4" height="13" rx="1"/>' +
    '<rect x="17" y="3" width="4" height="18" rx="1"/></g></svg>'
});

export interface ITaskSidebarOptions {
  /** Fetches the rows (GET /easeml/tasks). */
  fetchTasks: () => Promise<ITaskRow[]>;
  /** Fetches the notebook sessions (GET /easeml/notebooks); none shown when absent. */
  fetchNotebooks?: () => Promise<INotebookSession[]>;
  /** Called when a task row is clicked or activated with Enter/Space. */
  onOpenTask: (name: string) => void;
  /** Milliseconds between refreshes while the panel is visible. */
  intervalMs?: number;
}

/** Text of an error for the sidebar. */
export function describeError(error: unknown): string {
  if (error instanceof EaseMLRequestError) {
    return `${error.message} (${error.code}, HTTP ${error.status})`;
  }
  if (error instanceof Error) {
    return `Cannot reach the Jupyter server: ${error.message}`;
  }
  return String(error);
}

export function formatAccuracy(accuracy: number | null | undefined): string {
  return typeof accuracy === 'number' && isFinite(accuracy) ? accuracy.toFixed(3) : '–';
}

export class TaskSidebar extends Widget {
  constructor(private readonly options: ITaskSidebarOptions) {
    super();
    this.id = SIDEBAR_ID;
    this.addClass('easeml-sidebar');
    this.title.icon = easemlIcon;
    this.title.caption = 'ease.ml tasks';

    const header = document.createElement('div');
    header.className = 'easeml-header';
    const title = document.createElement('h2');
    title.textContent = 'ease.ml tasks';
    this.refreshButton = document.createElement('button');
    this.refreshButton.className = 'easeml-refresh jp-Button jp-mod-minimal';
    this.refreshButton.title = 'Refresh the task list';
    this.refreshButton.textContent = '⟳';
    this.refreshButton.addEventListener('click', () => void this.refresh());
    header.append(title, this.refreshButton);

    this.statusNode = document.createElement('div');
    this.statusNode.className = 'easeml-status';
    this.statusNode.textContent = 'loading…';
    this.errorNode = document.createElement('div');
    this.errorNode.className = 'easeml-error';
    this.errorNode.setAttribute('role', 'alert');
    this.errorNode.hidden = true;
    this.listNode = document.createElement('ul');
    this.listNode.className = 'easeml-tasks';
    this.emptyNode = document.createElement('div');
    this.emptyNode.className = 'easeml-empty';
    this.emptyNode.textContent = 'No tasks yet. Run “ease.ml: new task” from the command palette.';
    this.emptyNode.hidden = true;
    const hint = document.createElement('div');
    hint.className = 'easeml-hint';
    hint.textContent = 'Click a task to add a %easeml status cell to the notebook.';
    const sessionsTitle = document.createElement('h3');
    sessionsTitle.className = 'easeml-notebooks-title';
    sessionsTitle.textContent = 'Notebook sessions';
    this.notebooksNode = document.createElement('ul');
    this.notebooksNode.className = 'easeml-notebooks';
    this.notebooksNoteNode = document.createElement('div');
    this.notebooksNoteNode.className = 'easeml-notebooks-note';
    this.node.append(header, this.statusNode, this.errorNode, this.listNode, this.emptyNode, hint);
    if (options.fetchNotebooks) {
      this.node.append(sessionsTitle, this.notebooksNode, this.notebooksNoteNode);
    }
  }

  /** The rows last shown. */
  get rows(): readonly ITaskRow[] {
    return this._rows;
  }

  /** Fetch and show the tasks now; a refresh already under way is reused. */
  refresh(): Promise<void> {
    if (!this.pending) {
      this.pending = this.load().finally(() => {
        this.pending = null;
      });
    }
    return this.pending;
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.timer = window.setInterval(() => {
      if (this.isVisible) {
        void this.refresh();
      }
    }, this.options.intervalMs ?? 5000);
  }

  protected onBeforeDetach(msg: Message): void {
    window.clearInterval(this.timer);
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refresh();
  }

  private async load(): Promise<void> {
    this.node.classList.add('easeml-loading');
    const notebooks = this.loadNotebooks();
    try {
      this.render(await this.options.fetchTasks());
      this.errorNode.hidden = true;
      this.errorNode.textContent = '';
      this.listNode.classList.remove('easeml-stale');
      const count = this._rows.length;
      this.statusNode.textContent = `${count} task${count === 1 ? '' : 's'} · updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      this.errorNode.textContent = describeError(error);
      this.errorNode.hidden = false;
      this.listNode.classList.add('easeml-stale');
      this.statusNode.textContent = `update failed at ${new Date().toLocaleTimeString()}`;
    } finally {
      await notebooks;
      this.node.classList.remove('easeml-loading');
    }
  }

  private async loadNotebooks(): Promise<void> {
    if (!this.options.fetchNotebooks) {
      return;
    }
    try {
      const sessions = await this.options.fetchNotebooks();
      this.notebooksNode.replaceChildren(...sessions.map(session => renderSession(session)));
      this.notebooksNoteNode.textContent = sessions.length ? '' : 'No notebook attached.';
    } catch (error) {
      this.notebooksNoteNode.textContent = `Sessions unavailable: ${describeError(error)}`;
    }
  }

  private render(rows: ITaskRow[]): void {
    this._rows = rows;
    this.listNode.replaceChildren(...rows.map(row => this.renderRow(row)));
    this.emptyNode.hidden = rows.length > 0;
  }

  private renderRow(row: ITaskRow): HTMLLIElement {
    const item = document.createElement('li');
    item.className = 'easeml-task';
    item.dataset.task = row.name;
    item.dataset.state = row.state;
    item.tabIndex = 0;
    item.setAttribute('role', 'button');
    const jobs = Object.entries(row.jobs || {})
      .map(([status, n]) => `${n} ${status}`)
      .join(', ');
    item.title = [
      row.program ?? '',
      row.model ? `best: ${row.model} (${formatAccuracy(row.accuracy)})` : 'no trained model yet',
      row.dataset_version !== null ? `data version ${row.dataset_version} (${row.n_examples} examples)` : 'no data yet',
      jobs ? `jobs: ${jobs}` : ''
    ]
      .filter(Boolean)
      .join('\n');

    const name = document.createElement('span');
    name.className = 'easeml-task-name';
    name.textContent = row.name;
    const state = document.createElement('span');
    state.className = `easeml-task-state easeml-state-${row.state.replace(/\s+/g, '-')}`;
    state.textContent = row.state;
    const accuracy = document.createElement('span');
    accuracy.className = 'easeml-task-accuracy';
    accuracy.textContent = formatAccuracy(row.accuracy);
    item.append(name, state, accuracy);

    const open = () => this.options.onOpenTask(row.name);
    item.addEventListener('click', open);
    item.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        open();
      }
    });
    return item;
  }

  private readonly refreshButton: HTMLButtonElement;
  private readonly statusNode: HTMLDivElement;
  private readonly errorNode: HTMLDivElement;
  private readonly listNode: HTMLUListElement;
  private readonly emptyNode: HTMLDivElement;
  private readonly notebooksNode: HTMLUListElement;
  private readonly notebooksNoteNode: HTMLDivElement;
  private _rows: ITaskRow[] = [];
  private pending: Promise<void> | null = null;
  private timer = 0;
}

/** One notebook session: its path (or kernel id), its server, alive or gone. */
export function renderSession(session: INotebookSession): HTMLLIElement {
  const item = document.createElement('li');
  item.className = 'easeml-notebook';
  item.dataset.session = session.id;
  item.dataset.alive = String(session.alive);
  const path = document.createElement('span');
  path.className = 'easeml-notebook-path';
  path.textContent = session.notebook_path || (session.kernel_id ? `kernel ${session.kernel_id}` : session.id);
  const server = document.createElement('span');
  server.className = 'easeml-notebook-server';
  server.textContent = session.server_name || (session.hub_user ? `${session.hub_user}'s server` : 'default server');
  const alive = document.createElement('span');
  alive.className = `easeml-notebook-state easeml-notebook-${session.alive ? 'alive' : 'gone'}`;
  alive.textContent = session.alive ? 'alive' : 'gone';
  item.title = [
    session.kernel_id ? `kernel ${session.kernel_id}` : '',
    session.tasks && session.tasks.length ? `tasks: ${session.tasks.join(', ')}` : ''
  ]
    .filter(Boolean)
    .join('\n');
  item.append(path, server, alive);
  return item;
}

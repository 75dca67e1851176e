/**
 * ease-jupyter: the ease.ml sidebar and commands for JupyterLab 4.
 *
 * Commands (also in the palette, category "ease.ml"):
 * - `easeml:new-task`       "ease.ml: new task"         asks for a name, inserts a `%%easeml task NAME` template (not run)
 * - `easeml:service-view`   "ease.ml: open service view" inserts and runs `%easeml status --all`
 * - `easeml:task-status`    (args: {name})               inserts and runs `%easeml status NAME` (a sidebar click)
 * - `easeml:refresh`        "ease.ml: refresh tasks"
 *
 * The service's notifications (a better model, a task done, a failed job, a
 * spent budget) show as toasts in the notification centre (notifications.ts).
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, InputDialog, Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';

import { SERVICE_VIEW_SOURCE, insertCell, newTaskSource, statusSource, targetNotebook } from './cells';
import { INotebookSession, INotificationBatch, ITaskRow, requestAPI } from './handler';
import { NotificationPoller } from './notifications';
import { TaskSidebar } from './sidebar';

export namespace CommandIDs {
  export const newTask = 'easeml:new-task';
  export const serviceView = 'easeml:service-view';
  export const taskStatus = 'easeml:task-status';
  export const refresh = 'easeml:refresh';
}

const TASK_NAME = /^[A-Za-z_][\w.-]*$/;

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'ease-jupyter:plugin',
  description: 'The ease.ml task sidebar and %easeml commands.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const write = async (source: string, run: boolean) => {
      try {
        await insertCell(await targetNotebook(app, tracker), source, run);
      } catch (error) {
        Notification.error(`ease.ml: ${error instanceof Error ? error.message : String(error)}`, { autoClose: 8000 });
      }
    };

    const sidebar = new TaskSidebar({
      fetchTasks: () => requestAPI<ITaskRow[]>('tasks'),
      fetchNotebooks: () => requestAPI<INotebookSession[]>('notebooks'),
      onOpenTask: name => void app.commands.execute(CommandIDs.taskStatus, { name })
    });

    app.commands.addCommand(CommandIDs.newTask, {
      label: 'ease.ml: new task',
      caption: 'Insert a %%easeml task cell with an ease.ml program to edit',
      execute: async () => {
        const answer = await InputDialog.getText({
          title: 'ease.ml: new task',
          label: 'Task name',
          text: 'my_task'
        });
        const name = (answer.value ?? '').trim();
        if (!answer.button.accept || !name) {
          return;
        }
        if (!TASK_NAME.test(name)) {
          Notification.error(`ease.ml: task name ${JSON.stringify(name)}: expected letters, digits, _ . - (not first)`);
          return;
        }
        await write(newTaskSource(name), false);
      }
    });
    app.commands.addCommand(CommandIDs.serviceView, {
      label: 'ease.ml: open service view',
      caption: 'Insert and run %easeml status --all: the service view across all users',
      execute: () => write(SERVICE_VIEW_SOURCE, true)
    });
    app.commands.addCommand(CommandIDs.taskStatus, {
      label: args => (args.name ? `ease.ml: status of ${args.name}` : 'ease.ml: task status'),
      execute: args => write(statusSource(String(args.name)), true)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'ease.ml: refresh tasks',
      execute: () => sidebar.refresh()
    });
    if (palette) {
      for (const command of [CommandIDs.newTask, CommandIDs.serviceView, CommandIDs.refresh]) {
        palette.addItem({ command, category: 'ease.ml' });
      }
    }

    new NotificationPoller(after =>
      requestAPI<INotificationBatch>(after === null ? 'notifications' : `notifications?after=${after}`)
    ).start();

    app.shell.add(sidebar, 'left', { rank: 650 });
    if (restorer) {
      restorer.add(sidebar, sidebar.id);
    }
  }
};

export default plugin;

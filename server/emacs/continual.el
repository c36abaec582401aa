;;; continual.el --- Review continual-lsp proposals in Emacs through eglot  -*- lexical-binding: t; -*-

;; Tested with Emacs 28.2 and eglot 1.9 (Debian 12's emacs-nox and elpa-eglot).
;;
;; Setup:
;;   (load "/path/to/continual-lsp/server/emacs/continual.el")
;;   (add-to-list 'eglot-server-programs
;;                '((python-mode js-mode) . (continual-server "continual-lsp" "serve")))
;; then M-x eglot in a project, M-x continual-start-task, and review with
;; M-x continual-approve / continual-deny / continual-pending / continual-status,
;; or with the code actions on a proposal's diagnostic (M-x eglot-code-actions).
;; A proposal a guard blocks is never approved: M-x continual-override runs it anyway
;; (the override counts against the guard). M-x continual-ledger lists where each
;; correction went; M-x continual-promote keeps a task-scoped one as a standing rule.
;;
;; Requests go out asynchronously and are waited for here: Emacs 28's jsonrpc leaves
;; messages that arrive behind the response of a synchronous request unprocessed until
;; the server writes again. Every response carries the proposal it concerns, so nothing
;; here depends on when a notification is processed.

;;; Code:

(require 'cl-lib)
(require 'eglot)
(require 'jsonrpc)
(require 'project)
(require 'subr-x)

(defgroup continual nil
  "Review a coding agent that learns from your corrections."
  :group 'tools)

(defcustom continual-request-timeout 600
  "Seconds to wait for an answer (starting a task samples the model)."
  :type 'number)

(defclass continual-server (eglot-lsp-server) ()
  :documentation "A continual-lsp server: renders `continual/proposal' itself.")

(defvar continual-proposals (make-hash-table :test 'equal)
  "Proposals waiting for a decision, by id (plists as on the wire).")

(defvar continual-last-proposal nil
  "Id of the proposal shown last: the default of every decision command.")

(defvar continual-proposal-functions nil
  "Functions called with each new proposal plist.")

(defvar continual-last-learned nil
  "The last step the server announced (`continual/learned' plist): a denial's step
lands after its retry is shown.")

(defvar continual--connection nil
  "The last continual server connected, for buffers eglot does not manage.")

(cl-defmethod eglot-initialization-options ((server continual-server))
  (setq continual--connection server)
  (list :continualProposals t))

(defun continual--server ()
  (let ((current (eglot-current-server)))
    (cond ((cl-typep current 'continual-server) current)
          ((and continual--connection (jsonrpc-running-p continual--connection))
           continual--connection)
          (t (user-error "continual: no continual-lsp server; run M-x eglot first")))))

(defun continual--request (method params)
  "Send METHOD with PARAMS and wait for its result.
Asynchronously: see the commentary for why."
  (let ((done nil) (result nil) (failure nil))
    (jsonrpc-async-request
     (continual--server) method params
     :success-fn (lambda (r) (setq result r done t))
     :error-fn (lambda (e) (setq failure (plist-get e :message) done t))
     :timeout-fn (lambda () (setq failure "no answer in time" done t))
     :timeout continual-request-timeout)
    (while (not done)
      (accept-process-output nil 0.1))
    (when failure
      (user-error "continual: %s" failure))
    result))

;;; Proposals

(defun continual--receive (proposal)
  "Show PROPOSAL (a plist) unless it was shown already; nil is ignored."
  (when proposal
    (let ((id (plist-get proposal :proposalId)))
      (unless (gethash id continual-proposals)
        (puthash id proposal continual-proposals)
        (setq continual-last-proposal id)
        (continual--show proposal)
        (run-hook-with-args 'continual-proposal-functions proposal)))))

(defun continual--forget (id)
  (remhash id continual-proposals)
  (when (equal id continual-last-proposal)
    (setq continual-last-proposal nil)))

(defun continual--show (proposal)
  (let ((diff (plist-get proposal :diff))
        (tool (plist-get proposal :tool))
        (id (plist-get proposal :proposalId)))
    (with-current-buffer (get-buffer-create "*continual*")
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (format "Proposal %s: %s\n" id tool))
        (when-let ((blocked (plist-get proposal :blockedBy)))
          (insert (format "Blocked by a guard: %s\n" blocked)))
        (when-let ((note (plist-get proposal :note)))
          (insert note "\n"))
        (when-let ((checked (plist-get proposal :checked)))
          (insert (format "Checked: %s\n" checked)))
        (insert (cond (diff)
                      ;; The model's own end of the task: its summary is the proposal.
                      ((equal tool "done")
                       (format "The agent says the task is done:\n%s\n"
                               (plist-get (plist-get proposal :arguments) :summary)))
                      (t (format "%S\n" (plist-get proposal :arguments))))))
      (when (and diff (fboundp 'diff-mode))
        (diff-mode))
      (setq buffer-read-only t))
    (cond ((equal tool "done")
           (message "continual: the agent says the task is done (%s): %s; M-x continual-approve finishes it, continual-deny says what is left"
                    id (plist-get (plist-get proposal :arguments) :summary)))
          ((plist-get proposal :blockedBy)
           (message "continual: proposal %s (%s) is blocked by a guard (%s); M-x continual-override, or edit or deny it"
                    id tool (plist-get proposal :blockedBy)))
          (t (message "continual: proposal %s (%s); M-x continual-approve or continual-deny"
                      id tool)))))

(defun continual--read-id ()
  (let ((ids (hash-table-keys continual-proposals)))
    (cond ((null ids) (user-error "continual: no proposal waits; try M-x continual-pending"))
          ((and continual-last-proposal (not current-prefix-arg)) continual-last-proposal)
          (t (completing-read "Proposal: " ids nil t)))))

(defun continual--settle (proposal)
  "Mark the buffer of PROPOSAL's file unmodified if it now matches the file.
The server changed the buffer and the agent wrote the file: saving must
not ask about a change on disk."
  (when-let* ((uri (plist-get proposal :uri))
              (buffer (find-buffer-visiting (eglot--uri-to-path uri))))
    (with-current-buffer buffer
      (let ((file buffer-file-name))
        (when (and (buffer-modified-p) file (file-exists-p file)
                   (string= (buffer-substring-no-properties (point-min) (point-max))
                            (with-temp-buffer
                              (insert-file-contents file)
                              (buffer-string))))
          (set-visited-file-modtime)
          (set-buffer-modified-p nil))))))

(defun continual--decided (id result)
  "Bookkeeping after deciding ID: RESULT carries the next proposal."
  (let ((proposal (gethash id continual-proposals)))
    (continual--forget id)
    (when proposal
      (continual--settle proposal)))
  (when-let ((learned (plist-get result :learned)))
    (message "continual: learned (step %s, loss %.3f, %.1fs)"
             (plist-get learned :step) (plist-get learned :loss)
             (plist-get learned :seconds)))
  (continual--receive (plist-get result :nextProposal))
  result)

(defun continual--decide (id decision &optional correction)
  (continual--decided
   id (continual--request :continual/decide
                          `(:proposalId ,id :decision ,decision
                                        ,@(and correction `(:correction ,correction))))))

;;; Commands

(defun continual--files-in-view ()
  "The current buffer's file as a vector, when it is in the project: the task
starts with it in view, so a small model edits it instead of hunting for it."
  (let ((file buffer-file-name)
        (project (project-current)))
    (when (and file project (file-in-directory-p file (project-root project)))
      (vector (expand-file-name file)))))

(defun continual-start-task (text)
  "Give the agent a task; its first proposal is shown.
The current buffer's file, when it is in the project, starts the task in view."
  (interactive "sTask: ")
  (let* ((files (continual--files-in-view))
         (result (continual--request :continual/startTask
                                     `(:text ,text ,@(and files `(:files ,files))))))
    (continual--receive (plist-get result :proposal))
    result))

(defun continual-approve (id)
  "Approve proposal ID: it runs (a file change goes to the buffer and the disk).
Approving the agent's `done' finishes the task with its summary."
  (interactive (list (continual--read-id)))
  (when-let ((blocked (plist-get (gethash id continual-proposals) :blockedBy)))
    (user-error "continual: a guard blocks %s (%s); M-x continual-override runs it anyway"
                id blocked))
  (continual--decide id "approve"))

(defun continual-override (id)
  "Run proposal ID although a guard blocks it.
The override counts against the guard: one overridden twice retires to a bullet."
  (interactive (list (continual--read-id)))
  (continual--decide id "override"))

(defun continual-ledger ()
  "Where each correction went: lane, counts and why (buffer *continual-ledger*)."
  (interactive)
  (let ((items (append (plist-get (continual--request :continual/ledger nil) :items) nil)))
    (with-current-buffer (get-buffer-create "*continual-ledger*")
      (let ((inhibit-read-only t))
        (erase-buffer)
        (dolist (item items)
          (insert (format "%s  %-7s %s%s%s%s\n    %s\n"
                          (plist-get item :id) (plist-get item :lane)
                          (if (eq (plist-get item :active) t) "" "(reverted) ")
                          (if (plist-get item :taskScoped) "[task-scoped] " "")
                          (if-let ((n (plist-get item :overridden)))
                              (format "[overridden %s] " n) "")
                          (plist-get item :text) (plist-get item :reason)))))
      (setq buffer-read-only t))
    items))

(defun continual-promote (item-id)
  "Keep the task-scoped correction ITEM-ID as a standing rule (routed again)."
  (interactive "sTask-scoped item id: ")
  (let ((result (continual--request :continual/promote `(:itemId ,item-id))))
    (message "continual: promoted to %s (%s)" (plist-get result :lane)
             (plist-get result :reason))
    result))

(defun continual-deny (id correction)
  "Deny proposal ID with CORRECTION: the agent learns from it and retries."
  (interactive (let ((id (continual--read-id)))
                 (list id (read-string (format "Correction for %s: " id)))))
  (when (string-empty-p (string-trim correction))
    (user-error "continual: a denial needs a correction"))
  (continual--decide id "deny" correction))

(defun continual-pending ()
  "Show what waits for a decision (after a reconnect or a lost message)."
  (interactive)
  (let ((proposals (append (plist-get (continual--request :continual/pending nil)
                                      :proposals)
                           nil)))
    (mapc #'continual--receive proposals)
    (unless proposals
      (message "continual: nothing waits for a decision"))
    proposals))

(defun continual-status ()
  "Backend, model, adapter and training state."
  (interactive)
  (let ((status (continual--request :continual/status nil)))
    (message "continual: %s %s, adapter %s, %s training steps, queue %s%s"
             (plist-get status :backend) (plist-get status :model)
             (or (plist-get status :adapterVersion) "base")
             (plist-get status :trainingSteps) (plist-get status :queueDepth)
             (if-let ((id (plist-get status :pendingProposalId)))
                 (format ", pending %s" id) ""))
    status))

;;; What the server sends

(cl-defmethod eglot-handle-notification
  ((_server continual-server) (_method (eql continual/proposal)) &rest proposal)
  (continual--receive proposal))

(cl-defmethod eglot-handle-notification
  ((_server continual-server) (_method (eql continual/learned))
   &rest note &key proposalId step loss &allow-other-keys)
  (setq continual-last-learned note)
  (message "continual: learned from %s (step %s, loss %.3f)" proposalId step loss))

(cl-defmethod eglot-handle-notification
  ((_server continual-server) (_method (eql continual/routed))
   &key lane reason &allow-other-keys)
  (message "continual: correction routed to %s (%s)" lane reason))

(cl-defmethod eglot-handle-notification
  ((_server continual-server) (_method (eql continual/taskDone))
   &key taskId summary &allow-other-keys)
  (dolist (id (hash-table-keys continual-proposals))
    (when (equal (plist-get (gethash id continual-proposals) :taskId) taskId)
      (continual--forget id)))
  (message "continual: task %s done: %s" taskId summary))

(cl-defmethod eglot-handle-request
  ((_server continual-server) (_method (eql workspace/applyEdit)) &key _label edit)
  "The reviewer asked for this edit by approving: apply it without asking again.
A buffer that changed since the server saw it refuses the (versioned) edit."
  (eglot--apply-workspace-edit edit nil)
  '(:applied t))

(cl-defmethod eglot-execute-command :around
  ((_server continual-server) command arguments)
  "The proposal code actions: the result carries the next proposal."
  (let ((result (cl-call-next-method))
        (name (format "%s" command)))
    (when (and (member name '("continual.approve" "continual.override" "continual.deny"
                              "continual.edit"))
               (eq (plist-get result :ok) t) (not (plist-get result :uri)))
      (continual--decided (elt arguments 0) result))
    result))

(provide 'continual)
;;; continual.el ends here

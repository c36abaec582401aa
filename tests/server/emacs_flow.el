;;; emacs_flow.el --- drive continual-lsp through eglot, headless  -*- lexical-binding: t; -*-
;;
;; emacs --batch -Q -l emacs_flow.el, with CONTINUAL_WS (workspace), CONTINUAL_OUT (the
;; JSON report), CONTINUAL_CMD (the server command, a JSON list) and CONTINUAL_MODULE
;; (server/emacs/continual.el: the module path) or none (a plain eglot client), and
;; CONTINUAL_FLOW naming another flow of the module (override, scoped).
;; Every wait is on a condition with a deadline; nothing sleeps to synchronise.

(dolist (dir (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/*"))
  (add-to-list 'load-path dir))
(require 'eglot)
(require 'json)
(require 'flymake)

(defvar flow-ws (file-name-as-directory (getenv "CONTINUAL_WS")))
(defvar flow-module (getenv "CONTINUAL_MODULE"))
(defvar flow-name (getenv "CONTINUAL_FLOW"))
(defvar flow-choose "Approve" "The code action the reviewer picks (a title prefix).")
(defconst flow-scoped-correction
  "Change only the line with the bug in ops.py; use edit_lines, do not rewrite the file."
  "Issue 31's correction about this change only.")
(defvar flow-report nil "Alist written as the JSON report.")
(defvar flow-messages nil "Every message the server sent, newest first.")
(defvar flow-choices nil "(prompt . choices) of every completing-read eglot asked.")
(defvar flow-confirmations nil "Prompts of every y-or-n-p eglot asked.")

(setq eglot-sync-connect t
      eglot-connect-timeout 300
      jsonrpc-default-request-timeout 300
      eglot-autoshutdown nil)

(add-hook 'project-find-functions
          (lambda (dir)
            (when (string-prefix-p flow-ws (file-name-as-directory (expand-file-name dir)))
              (cons 'transient flow-ws))))

(advice-add 'jsonrpc-connection-receive :before
            (lambda (_connection message) (push message flow-messages)))

;; The reviewer's answers to eglot's own prompts: the Approve code action, the Approve
;; button of window/showMessageRequest, and yes to eglot's "Server wants to edit".
(advice-add 'completing-read :override
            (lambda (prompt collection &rest _)
              (let ((titles (mapcar (lambda (c) (if (consp c) (car c) c)) collection)))
                (push (cons prompt titles) flow-choices)
                (or (seq-find (lambda (title) (string-prefix-p flow-choose title)) titles)
                    (error "no %s among %S" flow-choose titles)))))
(advice-add 'y-or-n-p :override
            (lambda (prompt) (push prompt flow-confirmations) t))

(defun flow-note (key value)
  (setf (alist-get key flow-report) value))

(defun flow-step (step)
  (flow-note 'steps (append (alist-get 'steps flow-report) (list step))))

(defun flow-wait (what predicate &optional timeout)
  "Process server output until PREDICATE holds; fail after TIMEOUT seconds."
  (let ((deadline (+ (float-time) (or timeout 120))) value)
    (while (not (setq value (funcall predicate)))
      (when (> (float-time) deadline)
        (error "timed out waiting for %s" what))
      (accept-process-output nil 0.05))
    value))

(defun flow-message (method &optional predicate)
  (seq-find (lambda (m) (and (equal (plist-get m :method) method)
                             (or (null predicate) (funcall predicate (plist-get m :params)))))
            flow-messages))

(defun flow-file (rel)
  (with-temp-buffer
    (insert-file-contents (expand-file-name rel flow-ws))
    (buffer-string)))

(defun flow-line (buffer n)
  (with-current-buffer buffer
    (save-excursion
      (goto-char (point-min))
      (forward-line (1- n))
      (buffer-substring-no-properties (line-beginning-position) (line-end-position)))))

(defun flow-approve-by-code-action (buffer line)
  "What M-x eglot-code-actions does on LINE, choosing Approve: eglot applies the
action's edit (if any), then runs its command."
  (with-current-buffer buffer
    (goto-char (point-min))
    (forward-line (1- line))
    ;; Invoked from the keyboard (M-x), so eglot asks with completing-read, not a menu.
    (let ((last-nonmenu-event ?\r))
      (eglot-code-actions (line-beginning-position) (line-end-position) nil t)))
  (flow-note 'actions (cdr (car flow-choices))))

(defun flow-code-action (buffer line choice)
  "Run the code action on LINE of BUFFER whose title starts with CHOICE."
  (let ((flow-choose choice))
    (flow-approve-by-code-action buffer line)))

(defun flow-refusal (fn)
  "The message of the user-error FN signals, or nil."
  (condition-case err (progn (funcall fn) nil) (user-error (error-message-string err))))

(defun flow-ledger ()
  ;; Vectors: json-encode would take a list of lists that start with a string for an alist.
  (mapcar (lambda (i) (vector (plist-get i :id) (plist-get i :text) (plist-get i :lane)
                            (or (plist-get i :overridden) :json-false)
                            (if (plist-get i :taskScoped) t :json-false)
                            (if (eq (plist-get i :active) t) t :json-false)))
          (continual-ledger)))

(defun flow-override ()
  "A guard blocks the fix: Override (never Approve) among the code actions; override it."
  (load flow-module nil t)
  (let* ((ops (flow-start 'continual-server))
         (started (with-current-buffer ops
                    (continual-start-task "fix mean() so test_mean passes")))
         (shown (plist-get started :proposal))
         (id (plist-get shown :proposalId)))
    (flow-note 'tool (plist-get shown :tool))
    (flow-note 'blocked_by (plist-get shown :blockedBy))
    (flow-step "blocked proposal")
    ;; Approve is refused: by the module, and by the server for a client that sends it.
    (flow-note 'module_refused (flow-refusal (lambda () (continual-approve id))))
    (flow-note 'server_refused (flow-refusal (lambda () (continual--decide id "approve"))))
    (flow-note 'refused_buffer (flow-line ops 7))
    (flow-code-action ops 7 "Override guard")
    (flow-note 'override_buffer (flow-line ops 7))
    (flow-note 'override_modified (if (buffer-modified-p ops) t :json-false))
    (flow-note 'override_disk (flow-file "src/calc/ops.py"))
    (flow-step "overridden by code action")
    (flow-note 'next_tool (plist-get (gethash continual-last-proposal continual-proposals) :tool))
    (flow-note 'ledger (flow-ledger))
    (flow-step "ledger")))

(defun flow-scoped ()
  "A correction about this change only: the one-line fix is the retry, approved by code action."
  (load flow-module nil t)
  (let* ((ops (flow-start 'continual-server))
         (started (with-current-buffer ops
                    (continual-start-task "Fix the bug in mean() in src/calc/ops.py")))
         (first (plist-get started :proposal)))
    (flow-note 'first_tool (plist-get first :tool))
    (flow-step "proposal")
    (let* ((denied (continual-deny (plist-get first :proposalId) flow-scoped-correction))
           (retry (plist-get denied :nextProposal)))
      (flow-note 'retry_tool (plist-get retry :tool))
      (flow-note 'retry_content (plist-get (plist-get retry :arguments) :content))
      (flow-note 'retry_blocked (or (plist-get retry :blockedBy) :json-false))
      (flow-step "denied")
      (flow-code-action ops 7 "Approve")
      (flow-note 'approve_buffer (flow-line ops 7))
      (flow-note 'approved_disk (flow-file "src/calc/ops.py"))
      (flow-step "approved by code action")
      (flow-note 'ledger (flow-ledger))
      (flow-step "ledger")
      ;; The reviewer keeps it after all: M-x continual-promote routes it as a standing rule.
      (let* ((scoped (seq-find (lambda (i) (equal (plist-get i :text) flow-scoped-correction))
                               (continual-ledger)))
             (promoted (continual-promote (plist-get scoped :id))))
        (flow-note 'promoted_lane (plist-get promoted :lane))
        (flow-note 'promoted_id (plist-get promoted :itemId))
        (flow-note 'ledger_after (flow-ledger)))
      (flow-step "promoted"))))

(defun flow-start (class)
  (let ((buffer (find-file-noselect (expand-file-name "src/calc/ops.py" flow-ws))))
    (with-current-buffer buffer
      (python-mode)
      (eglot '(python-mode) (project-current) class
             (append (json-read-from-string (getenv "CONTINUAL_CMD")) nil) "python")
      (flow-wait "eglot to manage ops.py" #'eglot-current-server))
    buffer))

(defun flow-with-module ()
  (load flow-module nil t)
  (let* ((ops (flow-start 'continual-server))
         ;; Started from ops.py's buffer: the module sends it as the file in view.
         (started (with-current-buffer ops
                    (continual-start-task "fix mean() so test_mean passes")))
         (first (plist-get started :proposal)))
    ;; 1. The first proposal comes with the response, whatever jsonrpc does with the
    ;;    notification behind it.
    (flow-note 'first_tool (plist-get first :tool))
    (flow-note 'first_uri (plist-get first :uri))
    (flow-step "proposal")
    ;; 2. Deny with a correction: the retry at once, then the SDPO step's notification.
    (let* ((denied (continual-deny (plist-get first :proposalId)
                                   "Never weaken a test; fix the code instead."))
           (retry (plist-get denied :nextProposal))
           (learned (flow-wait "the denial's step" (lambda () continual-last-learned) 600)))
      (flow-note 'learned_step (plist-get learned :step))
      (flow-note 'learned_seconds (plist-get learned :seconds))
      (flow-note 'retry_tool (plist-get retry :tool))
      (flow-note 'retry_uri (plist-get retry :uri))
      (flow-step "denied")
      ;; 3. Approve the retry through eglot's code-action path.
      (flow-approve-by-code-action ops 7)
      (flow-note 'approve_buffer (flow-line ops 7))
      (flow-note 'approve_modified (if (buffer-modified-p ops) t :json-false))
      (flow-note 'approved_disk (flow-file "src/calc/ops.py"))
      (flow-step "approved by code action")
      ;; The code action's result carried the next proposal: a file no buffer visits.
      (let ((changes (gethash continual-last-proposal continual-proposals)))
        (flow-note 'changes_tool (plist-get changes :tool))
        (let ((approved (continual-approve (plist-get changes :proposalId))))
          (flow-note 'changes_disk (flow-file "CHANGES.md"))
          (flow-note 'changes_open (if (find-buffer-visiting
                                        (expand-file-name "CHANGES.md" flow-ws))
                                       t :json-false))
          (flow-step "approved a file not open")
          ;; 4. Status and pending agree on what waits: the bash call.
          (let* ((bash (plist-get approved :nextProposal))
                 (status (continual-status))
                 (pending (continual-pending)))
            (flow-note 'bash_tool (plist-get bash :tool))
            (flow-note 'status_pending (equal (plist-get status :pendingProposalId)
                                              (plist-get bash :proposalId)))
            (flow-note 'pending_ids (mapcar (lambda (p) (plist-get p :proposalId)) pending))
            (flow-note 'bash_id (plist-get bash :proposalId))
            (flow-note 'training_steps (plist-get status :trainingSteps))
            (flow-step "status")
            ;; 5. The command runs; the agent says the task is done in its own words,
            ;;    and approving that ends the task (continual/taskDone).
            (let ((done (plist-get (continual-approve (plist-get bash :proposalId))
                                   :nextProposal)))
              (flow-note 'done_tool (plist-get done :tool))
              (flow-note 'done_shown (with-current-buffer "*continual*" (buffer-string)))
              (continual-approve (plist-get done :proposalId))
              (flow-note 'task_done
                         (plist-get (plist-get (flow-wait "continual/taskDone"
                                                          (lambda ()
                                                            (flow-message "continual/taskDone")))
                                               :params)
                                    :summary))
              (flow-step "finished"))))))))

(defun flow-plain ()
  (let ((ops (flow-start 'eglot-lsp-server))
        (server nil))
    (setq server (with-current-buffer ops (eglot-current-server)))
    ;; A plain client cannot start a task; the test does, without waiting on it.
    (jsonrpc-async-request server :continual/startTask '(:text "run the tests")
                           :success-fn #'ignore)
    ;; 1. bash as window/showMessageRequest: eglot asks, the reviewer picks Approve.
    (let ((asked (flow-wait "window/showMessageRequest"
                            (lambda ()
                              (seq-find (lambda (c) (string-match-p "Choose an option" (car c)))
                                        flow-choices))
                            180)))
      (flow-note 'bash_prompt (car asked))
      (flow-note 'bash_choices (cdr asked)))
    (flow-step "bash approved")
    ;; 2. The next proposal changes a file: a diagnostic, then the Approve code action.
    (let ((uri (concat "file://" (expand-file-name "src/calc/ops.py" flow-ws))))
      (flow-note 'diagnostics
                 (flow-wait "a continual diagnostic on ops.py"
                            (lambda ()
                              (let ((m (flow-message
                                        "textDocument/publishDiagnostics"
                                        (lambda (p) (and (equal (plist-get p :uri) uri)
                                                         (> (length (plist-get p :diagnostics))
                                                            0))))))
                                (and m (mapcar (lambda (d) (plist-get d :message))
                                               (plist-get (plist-get m :params) :diagnostics)))))
                            180)))
    (with-current-buffer ops
      (flow-note 'flymake (mapcar #'flymake-diagnostic-text
                                  (flow-wait "flymake to show it"
                                             (lambda () (flymake-start) (flymake-diagnostics))))))
    (flow-approve-by-code-action ops 7)
    (flow-note 'confirmations flow-confirmations)
    (flow-note 'approve_buffer (flow-line ops 7))
    (flow-note 'approved_disk (flow-file "src/calc/ops.py"))
    (flow-step "approved by code action")))

(let ((out (getenv "CONTINUAL_OUT")))
  (condition-case err
      (progn
        (cond ((equal flow-name "override") (flow-override))
              ((equal flow-name "scoped") (flow-scoped))
              (flow-module (flow-with-module))
              (t (flow-plain)))
        (flow-note 'ok t))
    (error (flow-note 'ok :json-false)
           (flow-note 'error (error-message-string err))
           (flow-note 'received (mapcar (lambda (m) (or (plist-get m :method) "response"))
                                        (reverse flow-messages)))
           (flow-note 'asked (mapcar #'car flow-choices))))
  (ignore-errors
    (dolist (server (hash-table-values eglot--servers-by-project))
      (dolist (s server) (eglot-shutdown s))))
  (with-temp-file out
    (insert (json-encode flow-report)))
  (kill-emacs (if (eq (alist-get 'ok flow-report) t) 0 1)))

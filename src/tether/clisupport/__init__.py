"""What every command and demo prints and exits with: the JSON envelope, the exit-code table,
terminal-safe text, the default approvals store. Below the commands and the scenarios both."""

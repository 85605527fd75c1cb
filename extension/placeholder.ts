// The VS Code extension lives here (issue 5).
export {};

// Drives POST /v1/ag-ui/{agent} with the real @ag-ui/client (HttpAgent), as a front end does:
// run, see the interrupts the run ended with, resume them all, and print what the agent holds
// after each run as one JSON line (tests/test_agui_client.py reads them).
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, decision] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
agent.messages = [{ id: "m1", role: "user", content: "Send the notes." }];

function report(label, result) {
  const messages = agent.messages.map((m) => ({
    role: m.role,
    content: typeof m.content === "string" ? m.content : null,
    toolCalls: (m.toolCalls || []).map((c) => c.function.name),
    toolCallId: m.toolCallId || null,
  }));
  const pending = (agent.pendingInterrupts || []).map((i) => ({ id: i.id, reason: i.reason, message: i.message }));
  console.log(JSON.stringify({ label, messages, pending, newMessages: result.newMessages.length }));
}

const first = await agent.runAgent({});
report("first", first);
const payload = decision === "deny" ? { approved: false, reason: "not today" } : { approved: true };
const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload }));
const second = await agent.runAgent({ resume });
report("second", second);

// A front-end tool with the real @ag-ui/client: the app declares `setTheme`, the run ends with
// the model's call to it pending, the app "runs" it, adds the tool message and runs the agent
// again; prints the agent's messages after each run as one JSON line.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId] = process.argv.slice(2);
const tools = [{
  name: "setTheme",
  description: "Set the page's colour theme.",
  parameters: { type: "object", properties: { color: { type: "string" } }, required: ["color"] },
}];
const agent = new HttpAgent({ url, threadId });
agent.messages = [{ id: "m1", role: "user", content: "Make it green." }];

function report(label, pending) {
  const messages = agent.messages.map((m) => ({
    role: m.role,
    content: typeof m.content === "string" ? m.content : null,
    toolCalls: (m.toolCalls || []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
    toolCallId: m.toolCallId || null,
  }));
  console.log(JSON.stringify({ label, messages, pending }));
}

let pending = [];
await agent.runAgent({ tools }, {
  onRunFinishedEvent: ({ event }) => { pending = event.outcome?.pendingToolCallIds || []; },
});
report("first", pending);
for (const id of pending) {
  const call = agent.messages.flatMap((m) => m.toolCalls || []).find((c) => c.id === id);
  const { color } = JSON.parse(call.function.arguments);
  agent.addMessage({ id: `result-${id}`, role: "tool", toolCallId: id, content: `theme is now ${color}` });
}
pending = [];
await agent.runAgent({ tools }, {
  onRunFinishedEvent: ({ event }) => { pending = event.outcome?.pendingToolCallIds || []; },
});
report("second", pending);

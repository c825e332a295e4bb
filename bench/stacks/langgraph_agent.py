"""A one-node langgraph graph calling langchain-openai's ChatOpenAI (invoke, no streaming)."""

from common import BASE_URL, MODEL, PROMPT, answer
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

llm = ChatOpenAI(model=MODEL, base_url=BASE_URL)
graph = StateGraph(MessagesState)
graph.add_node("model", lambda state: {"messages": [llm.invoke(state["messages"])]})
graph.add_edge(START, "model")
graph.add_edge("model", END)
answer(graph.compile().invoke({"messages": [("user", PROMPT)]})["messages"][-1].content)

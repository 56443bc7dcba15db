//! The agent (`tenure agent --config FILE`): follows the log through the one node driver,
//! reconciles, gates and executes, and answers the HTTP API through [`request::AgentHandle`].

pub mod request;

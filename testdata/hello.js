console.log("hello from node", process.version);
